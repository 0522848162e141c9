"""Each ``iter()`` of a DataLoader, watched: the wrapper around ``DataLoader.__iter__`` and around
the own ``__iter__`` of a subclass that builds its iterator itself (torchdata's
``StatefulDataLoader`` never calls DataLoader's: watch saw no DataLoader iterated, issue 49).

Standard library only: under ``loaderdoc watch`` this file is loaded by path beside ``hook.py``,
after ``apply.py``, whose functions it calls.
"""

from __future__ import annotations

import contextlib
import sys
import threading

if __package__:  # imported as loaderdoc.watching.iterwrap
    from loaderdoc.watching import apply
else:  # loaded by path beside hook.py, which loads apply.py first
    apply = sys.modules["_loaderdoc_watch_apply"]

MARK = "_loaderdoc_watch"  # on a wrapper: the method is watched already

# loaders whose iteration an outer wrapper watches (a subclass's __iter__ that calls DataLoader's):
# the inner one returns the iterator as it is, so each epoch is recorded once, as the loop sees it
_outer = threading.local()


def watched_iter(original, recorder, applier, clock):
    """``original`` (an ``__iter__``) wrapped: the loader named at its iteration (--apply's table) and
    the iterator it returns handed to ``recorder.wrap``."""
    def __iter__(self):
        inside = getattr(_outer, "ids", None)
        if inside is None:
            inside = _outer.ids = set()
        if id(self) in inside:
            return original(self)
        started = clock()
        with contextlib.suppress(Exception):  # a name (and --apply's table) by the loop iterating it
            apply.at_iteration(self, applier, sys._getframe(1))
        inside.add(id(self))
        try:
            iterator = original(self)
        except BaseException as error:
            with contextlib.suppress(Exception):
                recorder.iter_failed(self, error)
            raise
        finally:
            inside.discard(id(self))
        return recorder.wrap(self, iterator, started)

    __iter__.__wrapped__ = original  # type: ignore[attr-defined]
    __iter__.__doc__ = original.__doc__
    __iter__.__qualname__ = getattr(original, "__qualname__", "DataLoader.__iter__")
    setattr(__iter__, MARK, True)
    return __iter__


def patch_subclass(klass, base, recorder, applier, clock) -> None:
    """Wrap the ``__iter__`` that ``klass`` (a subclass of ``base``, DataLoader) iterates with, once,
    where it is its own and not ``base``'s (already watched)."""
    for owner in klass.__mro__:
        if owner is base:
            return
        own = owner.__dict__.get("__iter__")
        if own is not None:
            if not getattr(own, MARK, False):
                owner.__iter__ = watched_iter(own, recorder, applier, clock)
            return
