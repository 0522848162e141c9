"""A forked child that grows its malloc heap by a known amount, for the heap readers' tests."""

from __future__ import annotations

import contextlib
import multiprocessing

GROWN_BYTES = 128 * 1024 * 1024


def _grow_heap_and_wait(ready, done) -> None:
    # 64 KiB blocks sit below glibc's mmap threshold: malloc takes them from the heap (brk)
    blocks = [bytearray(64 * 1024) for _ in range(GROWN_BYTES // (64 * 1024))]
    ready.set()
    done.wait(30)
    del blocks


@contextlib.contextmanager
def child_with_grown_heap():
    """Yields the pid of a forked child of this process that has grown its heap by ~128 MiB."""
    ctx = multiprocessing.get_context("fork")
    ready, done = ctx.Event(), ctx.Event()
    child = ctx.Process(target=_grow_heap_and_wait, args=(ready, done))
    child.start()
    try:
        assert ready.wait(30)
        yield child.pid
    finally:
        done.set()
        child.join(30)
