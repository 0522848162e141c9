"""User code that owns the process it runs in, for tests/test_faults_usercode.py
(``usercode_data:FACTORY``): it prints, exits, leaves threads running.

``USERCODE_NOISE`` (an environment variable) picks how the printing Dataset writes to standard
output, and where; every write carries the marker ``NOISE-<kind>`` so that a test sees it went
to stderr. ``USERCODE_MARK``: a file the Dataset creates once it is being measured.
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

KIND = os.environ.get("USERCODE_NOISE", "")
MARK = f"NOISE-{KIND}"


def _say(how: str) -> None:
    line = f"{MARK} pid {os.getpid()}\n"
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


if KIND == "import":
    print(f"{MARK} at import")


class Noisy(Dataset):
    def __len__(self) -> int:
        return 512

    def __getitem__(self, i: int):
        if KIND.startswith("getitem-") and i % 64 == 0:
            _say(KIND.removeprefix("getitem-"))
        if KIND == "worker":
            # loading that outlasts the step, so the probe measures workers whatever the machine's load
            time.sleep(0.002)
            if i % 64 == 0 and get_worker_info() is not None:
                print(f"{MARK} in worker {get_worker_info().id}")
        _mark()
        return torch.zeros(8)


def make_noisy():
    if KIND.startswith("factory-"):
        _say(KIND.removeprefix("factory-"))
    if KIND == "thread":  # prints while loaderdoc writes its own output, for as long as it lives
        def chatter():
            while True:
                print(f"{MARK} from a thread")
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
