"""Gather every rank's entry on rank 0 over torch.distributed: the launcher's store, gloo, objects.

The one module of the job check that imports torch (lazily, inside :func:`gather`). Before the
process group is made, the ranks answer a roll call in the store at ``MASTER_ADDR:MASTER_PORT``
(each sets ``joined/<rank>`` with its node and host): rank 0 waits for all of them for at most
``timeout`` seconds, so a rank that never starts is named ("ranks 2-3 (node 1) did not join")
instead of leaving rank 0 in ``init_process_group`` with only a count. Rank 0 then posts a
verdict the others wait on: on "ok" every rank makes a gloo group (no GPU needed) and sends its
entry with ``gather_object``; on a failure the others exit quietly and rank 0 prints the reason.

Under torchrun the agent on node 0 already serves the store (``TORCHELASTIC_USE_AGENT_STORE``),
so every rank is a client of it; otherwise rank 0 serves it, as torch's ``env://`` does. A node
whose torchrun never starts never reaches this code: torchrun's agents wait for it in their own
rendezvous (600 s by default; ``--rdzv-conf timeout=N`` for static, ``join_timeout=N`` for c10d).
"""

from __future__ import annotations

import contextlib
import json
from datetime import timedelta

from loaderdoc.cluster.launch import Place
from loaderdoc.errors import UserError

OK = "ok"
READ_WAIT_S = 10.0  # longest rank 0 waits, on a failed roll call, for the others to read its verdict


class RanksMissing(UserError):
    """Rank 0's roll call ran out of time; the message names who did not join."""


class JobStopped(Exception):
    """On a rank other than 0: rank 0 gave up (it prints why); this rank exits quietly."""


def _store(place: Place, timeout: float):
    from torch.distributed import PrefixStore, TCPStore

    serve = place.rank == 0 and not place.agent_store
    try:
        store = TCPStore(place.master_addr, place.master_port, None if serve else place.world_size, serve,
                         timedelta(seconds=timeout), wait_for_workers=False, **({"multi_tenant": True} if serve else {}))
    except Exception as exc:  # RuntimeError / DistNetworkError / DistStoreError: one line for the user
        where = f"{place.master_addr}:{place.master_port}"
        if serve:
            raise UserError(f"rank 0 cannot serve the job's store at {where}: {_first_line(exc)}") from None
        raise UserError(
            f"rank {place.rank}: no store answered at {where} within {timeout:g} s: is rank 0 running, and are "
            "MASTER_ADDR and MASTER_PORT the same for every rank?") from None
    return PrefixStore(f"loaderdoc/check/{place.restart}", store)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def roll_call(store, place: Place, hostname: str, timeout: float) -> None:
    """Every rank says it joined; rank 0 waits for all and posts the verdict the others wait on."""
    store.set(f"joined/{place.rank}", json.dumps({"node": place.node, "host": hostname}))
    if place.rank != 0:
        store.set_timeout(timedelta(seconds=2 * timeout))  # rank 0 may start late, then wait its whole timeout
        try:
            verdict = store.get("verdict").decode()
        except Exception as exc:
            raise UserError(f"rank {place.rank}: rank 0 posted no verdict within {2 * timeout:g} s "
                            f"({_first_line(exc)})") from None
        if verdict != OK:
            with contextlib.suppress(Exception):  # rank 0 may serve the store: it waits for this to exit
                store.set(f"read/{place.rank}", "1")
            raise JobStopped(verdict)
        return
    keys = [f"joined/{r}" for r in range(place.world_size)]
    try:
        store.wait(keys, timedelta(seconds=timeout))
    except Exception:  # the store's wait timed out: find out who is missing
        joined = joined_ranks(store, place)
        message = missing_message(joined, place, timeout)
        store.set("verdict", message)
        # Where rank 0 serves the store, its exit takes the store down: a rank still on its way to
        # the verdict would then fail to read it and print a connection error of its own. Wait
        # (bounded: a rank may have died since it joined) for every rank that joined to read it.
        with contextlib.suppress(Exception):
            store.wait([f"read/{r}" for r in joined if r != 0], timedelta(seconds=READ_WAIT_S))
        raise RanksMissing(message) from None
    store.set("verdict", OK)


def joined_ranks(store, place: Place) -> dict[int, dict]:
    """The ranks that answered the roll call, with the node and host each gave."""
    joined: dict[int, dict] = {}
    for r in range(place.world_size):
        if store.check([f"joined/{r}"]):
            joined[r] = json.loads(store.get(f"joined/{r}").decode())
    return joined


def missing_message(joined: dict[int, dict], place: Place, timeout: float) -> str:
    """One line: which ranks, and which nodes as far as rank 0 knows, did not join in time."""
    from loaderdoc.cluster.job import ranges

    missing = [r for r in range(place.world_size) if r not in joined]
    text = (f"{len(missing)} of {place.world_size} ranks did not join within {timeout:g} s: "
            f"rank{'s' if len(missing) > 1 else ''} {ranges(missing)}")
    seen = {j["node"] for j in joined.values() if j.get("node") is not None}
    if place.nodes:
        absent = [n for n in range(place.nodes) if n not in seen]
        if absent:
            text += f"; no rank of node{'s' if len(absent) > 1 else ''} {ranges(absent)} joined"
    hosts = sorted({j["host"] for j in joined.values()})
    text += f" (joined: {len(joined)} rank{'s' if len(joined) != 1 else ''} on {', '.join(hosts)}); "
    return text + "start every node's launcher with the same MASTER_ADDR, MASTER_PORT and world size"


def gather(place: Place, entry: dict, hostname: str, timeout: float) -> list[dict] | None:
    """Every rank's entry, in rank order, on rank 0; None on the other ranks."""
    import os

    # c10d logs each store timeout with a C++ stack trace; our one-line errors say what happened
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")
    import torch.distributed as dist
    from torch.distributed import PrefixStore

    store = _store(place, timeout)
    roll_call(store, place, hostname, timeout)
    try:
        dist.init_process_group("gloo", store=PrefixStore("pg", store), rank=place.rank,
                                world_size=place.world_size, timeout=timedelta(seconds=timeout))
    except Exception as exc:  # gloo could not connect the ranks (an interface, a firewall)
        raise UserError(f"rank {place.rank}: the gloo group did not form: {_first_line(exc)}; on hosts with "
                        "several networks set GLOO_SOCKET_IFNAME to the interface the nodes share") from None
    try:
        out: list | None = [None] * place.world_size if place.rank == 0 else None
        dist.gather_object(entry, out, dst=0)
        return out
    except Exception as exc:  # a rank died after the roll call: gloo times out or loses the peer
        raise UserError(f"rank {place.rank}: gathering the ranks' facts failed: {_first_line(exc)}") from None
    finally:
        dist.destroy_process_group()
