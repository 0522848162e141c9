"""Whose failure a failed configuration is: the user's code (its frame named as evidence), or
loaderdoc's own measuring machinery, which a finding must never put on the user's dataset
(issue 48: a CUDA context the measuring process could not start was reported as "a DataLoader
worker crashed ... fix the dataset")."""

from __future__ import annotations

import re
from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent.parent  # .../loaderdoc
FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')
# CUDA that will not start in the measuring process: its state, not the data
CUDA_START_MARKERS = ("cannot re-initialize cuda in forked subprocess", "cuda driver initialization failed",
                      "cuda call failed lazily at initialization", "no cuda gpus are available",
                      "could not start cuda in the measuring process")  # the last: probing.consumer's own words


def is_loaderdoc_frame(path: str) -> bool:
    """A frame in one of this package's own files (judged by the file, not by a folder name: a
    user's project may live under a folder named ``loaderdoc``)."""
    if "/loaderdoc/" not in path:
        return False
    return (_PACKAGE_DIR / path.rsplit("/loaderdoc/", 1)[1]).is_file()


def is_library_frame(path: str) -> bool:
    """A frame in torch or in loaderdoc itself, not in the user's code."""
    return "/site-packages/torch/" in path or "/dist-packages/torch/" in path or is_loaderdoc_frame(path)


def innermost_user_frame(traceback_text: str) -> str | None:
    """``brokends.py:10 in __getitem__``: the last frame outside torch and loaderdoc (a worker's
    traceback, which torch flattens into the message, included)."""
    mine = [f for f in FRAME.findall(traceback_text or "") if not is_library_frame(f[0])]
    if not mine:
        return None
    path, line, func = mine[-1]
    return f"{path.rsplit('/', 1)[-1]}:{line} in {func}"


def loaderdoc_failure(error: str, traceback_text: str, *, in_worker: bool) -> bool:
    """The failure is loaderdoc's: CUDA would not start in the measuring process itself (whoever
    called it: the training process is no fork, and a worker's refusal, which the user's job would
    meet too, is ``in_worker``), or no frame is the user's and the innermost is loaderdoc's own."""
    text = f"{error}\n{traceback_text}".lower()
    if not in_worker and any(marker in text for marker in CUDA_START_MARKERS):
        return True
    if innermost_user_frame(traceback_text) is not None:
        return False
    frames = FRAME.findall(traceback_text or "")
    return bool(frames) and is_loaderdoc_frame(frames[-1][0])
