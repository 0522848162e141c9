"""Gather every rank's entry on rank 0 over torch.distributed: the launcher's store, gloo, objects.

The one module of the job check that imports torch (lazily, inside :func:`gather`). Before the
process group is made, the ranks answer a roll call in the store at ``MASTER_ADDR:MASTER_PORT``
(each sets ``joined/<rank>`` with its node and host, and counts itself in its block of
``KEYS_PER_CALL`` ranks): rank 0 waits for all of them for at most ``timeout`` seconds, so a rank
that never starts is named ("ranks 2-3 (node 1) did not join") instead of leaving rank 0 in
``init_process_group`` with only a count. Rank 0 then posts a verdict the others wait on: on "ok"
every rank makes a gloo group (no GPU needed) and sends its entry with ``gather_object``; on a
failure the others exit quietly and rank 0 prints the reason.

Under torchrun the agent on node 0 already serves the store (``TORCHELASTIC_USE_AGENT_STORE``),
so every rank is a client of it; otherwise rank 0 serves it, as torch's ``env://`` does. A node
whose torchrun never starts never reaches this code: torchrun's agents wait for it in their own
rendezvous (600 s by default; ``--rdzv-conf timeout=N`` for static, ``join_timeout=N`` for c10d).

Before the roll call each rank compares its job (Slurm's job and step, torchrun's run id, the world
size: ``launch.job_identity``) with the one rank 0 posted, and claims its rank: a rank of another
job given the same MASTER_PORT is refused in one line instead of mixing into this job's report.

Every torch call runs in a helper thread (:func:`_bounded`) while the main thread waits with a
bound: a client facing a service that is not a torch store waits for its handshake with no end in
torch 2.13, and a thread blocked inside torch's C++ runs no Python signal handler.

Where rank 0 serves the store and MASTER_ADDR is a literal address of this host, the store listens
on that address only (a socket bound here, handed to torch as ``master_listen_fd``); given a host
name (or an address this host does not have) it listens on every interface, as torch's own does.
torch's TCPStore has no authentication: whoever reaches the port can read and write its keys.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import TypeVar

from loaderdoc.base.errors import UserError
from loaderdoc.base.output import end_without_finalizing
from loaderdoc.base.torchload import import_torch
from loaderdoc.cluster.launch import Place, job_conflict

OK = "ok"
READ_WAIT_S = 10.0  # longest rank 0 waits, on a failed roll call, for the others to read its verdict
GRACE_S = 1.0  # torch's own timeout fires first when nothing listens; this one when something mute does
# one store request names at most this many keys: a wait on every key of a world of 300,000 ranks
# broke the store's connection (exit 70); a block's counter says how many of its ranks joined
KEYS_PER_CALL = 10_000
EVERY_INTERFACE = "every interface"
T = TypeVar("T")


class RanksMissing(UserError):
    """Rank 0's roll call ran out of time; the message names who did not join."""


class JobStopped(Exception):
    """On a rank other than 0: rank 0 gave up (it prints why); this rank exits quietly."""


class _Late(Exception):
    """A torch call did not return within its bound."""


def _bounded(call: Callable[[], T], seconds: float) -> T:
    """``call()`` in a daemon thread; its result or its exception, or _Late after ``seconds``.

    The main thread only waits on an event, so SIGTERM and Ctrl+C end the command at once (the CLI's
    KeyboardInterrupt, exit 130); a thread left in torch does not hold up the exit, which then skips
    Python's finalization (``output.end_without_finalizing``)."""
    outcome: dict[str, object] = {}
    done = threading.Event()

    def target() -> None:
        try:
            outcome["value"] = call()
        except BaseException as exc:  # handed to the main thread, which raises it
            outcome["error"] = exc
        finally:
            done.set()

    threading.Thread(target=target, name="loaderdoc-c10d", daemon=True).start()
    try:
        if not done.wait(seconds):
            raise _Late
    finally:
        if not done.is_set():  # left behind in torch: it must not wake while Python finalizes
            end_without_finalizing()
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome["value"]  # type: ignore[return-value]


def where(place: Place) -> str:
    """MASTER_ADDR:MASTER_PORT as a client would write it ([::1]:29500 for IPv6)."""
    host = f"[{place.master_addr}]" if ":" in place.master_addr else place.master_addr
    return f"{host}:{place.master_port}"


def _port_in_use(place: Place) -> UserError:
    return UserError(f"rank 0 cannot serve the job's store: {where(place)} is in use (another job or service "
                     "listens on that port); give the job a free MASTER_PORT (torchrun --master-port)")


def _is_ip(addr: str) -> bool:
    try:
        ipaddress.ip_address(addr.split("%")[0])
    except ValueError:
        return False
    return True


def _listen_socket(place: Place) -> socket.socket | None:
    """A socket listening on MASTER_ADDR itself, for torch's store to serve on; None where the address
    is a host name or not this host's (torch then binds every interface, as it always does).

    A host name is not bound narrowly: it may resolve to a loopback address here (Debian's 127.0.1.1
    for the own name) and to the network address on the other nodes."""
    if not _is_ip(place.master_addr):
        return None
    family = socket.AF_INET6 if ":" in place.master_addr else socket.AF_INET
    try:
        return socket.create_server((place.master_addr, place.master_port), family=family,
                                    backlog=socket.SOMAXCONN)
    except OSError as exc:
        if exc.errno == errno.EADDRNOTAVAIL:  # not an address of this host (a NAT, a virtual IP)
            return None
        if exc.errno == errno.EADDRINUSE:
            raise _port_in_use(place) from None
        raise UserError(f"rank 0 cannot serve the job's store at {where(place)}: {exc.strerror}") from None


def _store(place: Place, timeout: float):
    """The store's client or server, and where rank 0's server listens ("" where rank 0 does not serve)."""
    import_torch()
    from torch.distributed import PrefixStore, TCPStore

    serve = place.rank == 0 and not place.agent_store
    listener = _listen_socket(place) if serve else None
    listens_on = "" if not serve else place.master_addr if listener else EVERY_INTERFACE
    elsewhere = serve and not listener and _is_ip(place.master_addr)  # a literal address this host lacks
    extra = {"master_listen_fd": listener.detach()} if listener else {"multi_tenant": True} if serve else {}
    try:
        store = _bounded(lambda: TCPStore(place.master_addr, place.master_port, None if serve else place.world_size,
                                          serve, timedelta(seconds=timeout), wait_for_workers=False, **extra),
                         timeout + GRACE_S)
    except Exception as exc:  # RuntimeError / DistNetworkError / DistStoreError / _Late: one line for the user
        if serve and "EADDRINUSE" in str(exc):
            raise _port_in_use(place) from None
        if serve:  # torch's server also connects to MASTER_ADDR as a client: a NAT or port forward must lead back
            hint = f"; {place.master_addr} is not an address of rank 0's host" if elsewhere else ""
            raise UserError(f"rank 0 cannot serve the job's store at {where(place)}: {_first_line(exc)}{hint}") from None
        # torch's client connects, then waits for the store's handshake with no end: something that
        # accepts connections and never answers is another service; torch's connect retries can also
        # outlast the bound when nothing listens at all
        if _accepts_connections(place):
            raise UserError(_not_a_store(place, timeout)) from None
        raise UserError(
            f"rank {place.rank}: no store answered at {where(place)} within {timeout:g} s: is rank 0 running, and are "
            "MASTER_ADDR and MASTER_PORT the same for every rank?") from None
    # from here on the store's C++ threads live until the process ends: Python's finalization must
    # not tear them down (a SIGTERM between two torch calls aborted the process, SIGABRT, exit -6)
    end_without_finalizing()
    return PrefixStore(f"loaderdoc/check/{place.restart}", store), listens_on


def _accepts_connections(place: Place) -> bool:
    try:
        with socket.create_connection((place.master_addr, place.master_port), timeout=1.0):
            return True
    except OSError:
        return False


def _not_a_store(place: Place, timeout: float) -> str:
    return (f"rank {place.rank}: {where(place)} accepts connections but did not answer as a torch store within "
            f"{timeout:g} s: another service listens on MASTER_PORT {place.master_port}; give the job a free "
            "MASTER_PORT (torchrun --master-port)")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def roll_call(store, place: Place, hostname: str, timeout: float) -> None:
    """Every rank says it joined; rank 0 waits for all and posts the verdict the others wait on."""
    if place.rank != 0:
        store.set_timeout(timedelta(seconds=2 * timeout))  # rank 0 may start late, then wait its whole timeout
    _same_job(store, place, timeout)
    _claim_rank(store, place, json.dumps({"node": place.node, "host": hostname, "claim": uuid.uuid4().hex}))
    if place.rank != 0:
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
    try:
        _wait_for(store, [f"joined/{r}" for r in range(place.world_size)], timeout)
    except Exception:  # the store's wait timed out: find out who is missing
        joined = joined_ranks(store, place)
        message = missing_message(joined, place, timeout)
        store.set("verdict", message)
        # Where rank 0 serves the store, its exit takes the store down: a rank still on its way to
        # the verdict would then fail to read it and print a connection error of its own. Wait
        # (bounded: a rank may have died since it joined) for every rank that joined to read it.
        with contextlib.suppress(Exception):
            _wait_for(store, [f"read/{r}" for r in joined if r != 0], READ_WAIT_S)
        raise RanksMissing(message) from None
    store.set("verdict", OK)


def _same_job(store, place: Place, timeout: float) -> None:
    """Rank 0 posts its job; every other rank reads it and leaves if it is another job's store."""
    mine = json.dumps(place.job, sort_keys=True)
    if place.rank == 0:  # the first rank 0 wins: under torchrun's agent store another job's rank 0 may be here
        posted = store.compare_set("job", "", mine).decode()
    else:
        try:
            posted = store.get("job").decode()
        except Exception as exc:
            raise UserError(f"rank {place.rank}: rank 0 did not answer the roll call within {2 * timeout:g} s "
                            f"({_first_line(exc)})") from None
    try:
        theirs = json.loads(posted)
    except ValueError:
        theirs = {}
    conflict = job_conflict(place.job, theirs) if isinstance(theirs, dict) else "an unknown one"
    if conflict:
        raise UserError(f"rank {place.rank}: {where(place)} is in use by another job ({conflict}); give each "
                        "job its own MASTER_PORT") from None


def _claim_rank(store, place: Place, claim: str) -> None:
    """This rank's roll call key, set only if no other process holds it: a rank number given twice (two
    jobs of one size that the launcher does not tell apart, or a hand-made launch) is refused."""
    held = store.compare_set(f"joined/{place.rank}", "", claim).decode()
    if held == claim:
        store.add(_block_key(place.rank), 1)
        return
    try:
        host = json.loads(held).get("host", "?")
    except (ValueError, AttributeError):
        host = "?"
    raise UserError(f"rank {place.rank}: another process on {host} already joined {where(place)} as rank "
                    f"{place.rank}: another job uses this MASTER_PORT, or two processes have RANK={place.rank}; "
                    "give each job its own MASTER_PORT and each process its own rank") from None


def joined_ranks(store, place: Place) -> dict[int, dict]:
    """The ranks that answered the roll call, with the node and host each gave."""
    joined: dict[int, dict] = {}
    for first in range(0, place.world_size, KEYS_PER_CALL):
        block = range(first, min(first + KEYS_PER_CALL, place.world_size))
        if not store.check([_block_key(first)]):
            continue  # no rank of this block joined: a world of a million ranks is a thousand requests
        if int(store.get(_block_key(first))) >= len(block):
            found = list(block)
        else:
            found = [r for r in block if store.check([f"joined/{r}"])]
        values = store.multi_get([f"joined/{r}" for r in found]) if found else []
        for r, value in zip(found, values, strict=True):
            joined[r] = json.loads(value.decode())
    return joined


def _block_key(rank: int) -> str:
    return f"joined-in/{rank // KEYS_PER_CALL}"


def _wait_for(store, keys: list[str], timeout: float) -> None:
    """The store's wait for every key, at most KEYS_PER_CALL keys a request, all within ``timeout``."""
    deadline = time.monotonic() + timeout
    for first in range(0, len(keys), KEYS_PER_CALL):
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"the keys were not all set within {timeout:g} s")
        store.wait(keys[first:first + KEYS_PER_CALL], timedelta(seconds=left))


def missing_message(joined: dict[int, dict], place: Place, timeout: float) -> str:
    """One line: which ranks, and which nodes as far as rank 0 knows, did not join in time."""
    from loaderdoc.base.units import ranges

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


def gather(place: Place, entry: dict, hostname: str, timeout: float) -> tuple[list[dict] | None, str]:
    """Every rank's entry, in rank order, on rank 0 (None on the other ranks), and where rank 0's
    store listened ("" where rank 0 did not serve it)."""
    # c10d logs each store timeout with a C++ stack trace; our one-line errors say what happened
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")
    store, listens_on = _store(place, timeout)
    # each step inside has its own timeout; this bound only catches a torch call that ignores it
    bound = 5 * timeout + READ_WAIT_S + GRACE_S
    try:
        entries = _bounded(lambda: _join_and_gather(store, place, entry, hostname, timeout), bound)
    except _Late:
        raise UserError(f"rank {place.rank}: the job check did not end within {bound:g} s (5 x --timeout + "
                        f"{READ_WAIT_S:g} s); a rank may have stopped answering") from None
    return entries, listens_on


def _join_and_gather(store, place: Place, entry: dict, hostname: str, timeout: float) -> list[dict] | None:
    import torch.distributed as dist
    from torch.distributed import PrefixStore

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
