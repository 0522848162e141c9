"""The watched epochs that nothing changes any more, serialized and summed once (issue 49).

Each epoch's end rewrote ``records-<pid>.json`` with every epoch so far serialized afresh, and
each sampler tick summed every epoch so far: what watching cost per epoch grew with the epochs
recorded (a 1-batch loader iterated 2000 times: 43 s watched, 1.5 s bare). The records still hold
every epoch; :func:`freeze` marks each loader's oldest epochs that can no longer change as frozen:
their sampler sums are added once, their JSON text is written once, and a write joins those texts
to the few epochs still open (:func:`records_json`, the same text ``json.dumps(to_dict())`` gives).

Standard library only: under ``loaderdoc watch`` this file is loaded by path beside ``hook.py``,
after ``sampler.py`` and ``trace.py``, whose functions it calls.
"""

from __future__ import annotations

import sys

if __package__:  # imported as loaderdoc.watching.frozen
    from loaderdoc.watching import sampler, trace
else:  # loaded by path beside hook.py, which loads sampler.py and trace.py first
    sampler = sys.modules["_loaderdoc_watch_sampler"]
    trace = sys.modules["_loaderdoc_watch_trace"]


def freeze(recorder, by=None) -> None:
    """Freeze each loader's epochs (a hook ``LoaderRecord``'s ``frozen``), oldest first, up to the
    first one that may still change. An epoch may change while its iterator lives (it may count
    more batches), until its end was accounted (``settled``), while a ledger may settle more CPU
    time or reads into it (a persistent worker serves it until the next epoch begins, a reaped
    worker's life is still to be found), while GPU waits of it are unresolved or the tracer
    records it, and, ended without its StopIteration, until the sampler read the memory after its
    last batch (it attributes the workers' memory to such an epoch). One that stays open holds back
    those after it, which are then summed and serialized at each tick and write, as all were before.
    ``by``: the sampler ticking (else the recorder's; none: no memory is attributed). Called under
    no lock of the caller's, from the loop's thread (a write) and the sampler's (a tick, a write)."""
    with recorder._freeze_lock:
        live = {id(e) for ledger in (recorder.cpu, recorder.io) for e in ledger.live()}
        smp = by if by is not None else recorder.sampler
        memory_at = smp._memory_at if smp is not None else float("inf")
        tracer = recorder.tracer
        for rec in list(recorder.loaders):
            done, sums = rec.frozen
            epochs = rec.epochs
            n = done
            while n < len(epochs):
                e = epochs[n]
                it = e.iterator
                if (not e.settled or (it is not None and it() is not None) or id(e) in live or e.gpu_pending
                        or trace.holds(tracer, e) or (not e.finished and (memory_at is None or e.last >= memory_at))):
                    break
                n += 1
            if n > done:  # one tuple: a reader in another thread gets a count and the sums over it
                rec.frozen = (n, sampler.accumulate(epochs[done:n], sums))


def records_json(recorder) -> str:
    """``json.dumps(recorder.to_dict())``, the same keys in the same order, each frozen epoch's text
    serialized once: what a write costs follows the epochs still open, not every one so far
    (joining the texts is a copy of bytes)."""
    import json

    recorder.freeze()
    dumps = json.dumps
    with recorder._freeze_lock:  # frozen_json grows under it: a write from either thread
        loaders = [_loader_json(rec, recorder.t0, dumps) for rec in list(recorder.loaders)]
    text = dumps(recorder._head())[:-1] + ', "loaders": [' + ", ".join(loaders) + "]"
    if recorder.tracer is not None:
        text += ', "trace": ' + dumps(recorder.tracer.to_dict())
    return text + "}"


def _loader_json(rec, t0: float, dumps) -> str:
    """``dumps(rec.to_dict(t0))``: the frozen epochs' texts, each serialized at the first write
    after it froze, and the open epochs afresh."""
    done = rec.frozen[0]
    texts = rec.frozen_json
    for e in rec.epochs[len(texts):done]:
        texts.append(dumps(e.to_dict(t0)))
    epochs = ", ".join([*texts[:done], *(dumps(e.to_dict(t0)) for e in rec.epochs[done:])])
    applied = rec._applied()
    return (dumps(rec._head())[:-1] + ', "epochs": [' + epochs + "]"
            + (", " + dumps(applied)[1:] if applied else "}"))
