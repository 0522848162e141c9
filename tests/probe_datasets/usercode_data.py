"""User code that owns the process it runs in, for tests/test_faults_usercode.py
(``usercode_data:FACTORY``): it prints, exits, leaves threads running.

``USERCODE_NOISE`` (an environment variable: kinds, comma-separated) picks how the printing
Dataset writes to standard output, and where; every write carries the marker ``NOISE-<kind>`` so
that a test sees it went to stderr. ``USERCODE_MARK``: a file the Dataset creates once it is being measured.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import threading
import time

import torch
from torch.utils.data import Dataset, get_worker_info

KINDS = [k for k in os.environ.get("USERCODE_NOISE", "").split(",") if k]


def _say(kind: str, how: str) -> None:
    line = f"NOISE-{kind} pid {os.getpid()}\n"
    if how == "print":
        print(line, end="")
    elif how == "write":
        sys.stdout.write(line)
    elif how == "fd":
        os.write(1, line.encode())
    elif how == "libc":  # C code writing fd 1 (no Python stream in between)
        ctypes.CDLL(None).write(1, line.encode(), len(line.encode()))
    elif how == "child":  # a process it starts inherits fd 1
        subprocess.run(["echo", line.strip()], check=True)


if "import" in KINDS:
    print("NOISE-import at import")


class Noisy(Dataset):
    def __len__(self) -> int:
        return 512

    def __getitem__(self, i: int):
        for kind in KINDS:
            if kind.startswith("getitem-") and i % 64 == 0:
                _say(kind, kind.removeprefix("getitem-"))
        if "worker" in KINDS:
            # loading that outlasts the step, so the probe measures workers whatever the machine's load
            time.sleep(0.002)
            if i % 64 == 0 and get_worker_info() is not None:
                print(f"NOISE-worker in worker {get_worker_info().id}")
        _mark()
        return torch.zeros(8)


def make_noisy():
    for kind in KINDS:
        if kind.startswith("factory-"):
            _say(kind, kind.removeprefix("factory-"))
    if "thread" in KINDS:  # prints while loaderdoc writes its own output, for as long as it lives
        def chatter():
            while True:
                print("NOISE-thread from a thread")
                time.sleep(0.001)

        threading.Thread(target=chatter, daemon=True).start()
    return Noisy()


def _mark() -> None:
    mark = os.environ.get("USERCODE_MARK")
    if mark and not os.path.exists(mark):
        with open(mark, "w") as fh:
            fh.write(str(os.getpid()))


def make_exiting():
    os._exit(0)


def make_exiting_thread():
    thread = threading.Thread(target=os._exit, args=(0,))
    thread.start()
    thread.join()
    return Noisy()


class ExitsInGetitem(Dataset):
    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int):
        os._exit(0)


def make_exiting_getitem():
    return ExitsInGetitem()


def make_lingering():
    """Leaves a non-daemon thread that never ends (a forgotten prefetcher, a metrics pusher)."""
    threading.Thread(target=time.sleep, args=(3600,), name="forgotten-prefetcher").start()
    return Noisy()
