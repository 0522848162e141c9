"""A forked child that grows its malloc heap by a known amount, for the heap readers' tests."""

from __future__ import annotations

import contextlib
import multiprocessing

GROW_BYTES = 128 * 1024 * 1024
BLOCK = 64 * 1024  # below glibc's mmap threshold: malloc serves it from the heap (brk)


def _heap_size() -> int:
    from loaderdoc.system.procmem import heap_bytes

    return heap_bytes() or 0


def _grow_heap_and_wait(go, grown, answered, done) -> None:
    go.wait(30)
    # free chunks inherited from the parent's heap are used first (the parent may hold many, e.g.
    # after torch freed large tensors): allocate until this heap itself grew by GROW_BYTES
    start, blocks = _heap_size(), []
    while _heap_size() - start < GROW_BYTES and len(blocks) < (1 << 16):  # at most 4 GiB
        blocks.extend(bytearray(BLOCK) for _ in range(256))
    grown.value = _heap_size() - start
    answered.set()
    done.wait(30)
    del blocks


@contextlib.contextmanager
def child_with_growing_heap():
    """Yields ``(pid, grow)``: a forked child of this process, and a function that makes it grow
    its heap by at least GROW_BYTES and returns by how much it did (the child's own reading)."""
    ctx = multiprocessing.get_context("fork")
    go, answered, done = ctx.Event(), ctx.Event(), ctx.Event()
    grown = ctx.Value("q", -1)
    child = ctx.Process(target=_grow_heap_and_wait, args=(go, grown, answered, done))
    child.start()

    def grow() -> int:
        go.set()
        assert answered.wait(60), "the child did not grow its heap"
        return grown.value

    try:
        yield child.pid, grow
    finally:
        go.set()
        done.set()
        child.join(30)
