"""Jobs and ports, through `check --distributed` as a launcher runs it: two jobs given one
MASTER_PORT, a service on MASTER_PORT that is not a torch store, signals while a rank waits, the
address rank 0's store listens on, and a launcher environment or --timeout that makes no sense.

Every rank is a real `python -m loaderdoc` process; ports come from the kernel (bind to port 0),
and a test waits for a listener by looking for it, never by sleeping a fixed time.
"""

from __future__ import annotations

import http.server
import json
import random
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
from faults_support import assert_nothing_left, fault_env, loaderdoc, one_line_error

from loaderdoc.base.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, UserError
from loaderdoc.cluster.launch import MAX_WORLD_SIZE, job_conflict, job_identity, read_place

pytest.importorskip("torch.distributed")

CMD = [sys.executable, "-m", "loaderdoc", "check", "--distributed"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_env(rank: int, world: int, port: int, addr: str = "127.0.0.1", **extra: str) -> dict:
    env, _ = fault_env({"RANK": str(rank), "WORLD_SIZE": str(world), "MASTER_ADDR": addr,
                        "MASTER_PORT": str(port), **extra})
    return env


def listening_on(port: int, proc: subprocess.Popen, deadline_s: float = 60) -> set[str]:
    """The addresses ``proc`` listens on at ``port``, once it does (it must not exit first)."""
    import psutil

    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        found = {c.laddr.ip for c in psutil.Process(proc.pid).net_connections("tcp")
                 if c.status == psutil.CONN_LISTEN and c.laddr.port == port}
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"nothing listened on port {port} within {deadline_s} s")


def start(env: dict, *args: str) -> subprocess.Popen:
    return subprocess.Popen([*CMD, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def finish(proc: subprocess.Popen, timeout: float = 90) -> subprocess.CompletedProcess:
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


# ---- two jobs on one MASTER_PORT ----------------------------------------------------------------
# One job's rank 0 (a Slurm job, a torchrun run id, a world size of 2) and a rank 1 of another job for
# each of those fields, differing in that one alone: each is refused, then the job's own rank 1 joins.
JOB = {"SLURM_JOB_ID": "111", "TORCHELASTIC_RUN_ID": "run-a", "GROUP_RANK": "0"}
# rank 0 waits this long for the job while the test starts its other ranks one after another (each a
# Python and torch start-up: 3 s alone, over 15 s on a CI box running the suite's other workers beside
# a busy core, where 60 s ran out before the job's own last rank joined); it ends as soon as they have
RANK0_WAITS_S = 300

OTHER_JOBS = [
    ({"SLURM_JOB_ID": "222"}, "(SLURM job 111; this rank's: 222)"),
    ({"TORCHELASTIC_RUN_ID": "run-b"}, "(torchrun run id 'run-a'; this rank's: 'run-b')"),
    ({"WORLD_SIZE": "3"}, "(a world size of 2; this rank's: 3)"),
]


def test_a_rank_of_another_job_on_the_same_port_is_refused_and_the_job_stays_its_own():
    port = free_port()
    env0 = rank_env(0, 2, port, **JOB)
    rank0 = start(env0, "--json", "--timeout", str(RANK0_WAITS_S))
    try:
        listening_on(port, rank0)
        for other_job, needle in OTHER_JOBS:
            other = loaderdoc(*CMD[3:], "--timeout", "10", env={**rank_env(1, 2, port, **JOB), **other_job})
            one_line_error(other, EXIT_USAGE, f"rank 1: 127.0.0.1:{port} is in use by another job {needle}",
                           "give each job its own MASTER_PORT")
        own = loaderdoc(*CMD[3:], "--timeout", "10", env=rank_env(1, 2, port, **JOB))
        assert (own.returncode, own.stdout, own.stderr) == (EXIT_OK, "", "")
    finally:
        done = finish(rank0)
        assert_nothing_left(env0["LOADERDOC_FAULT_TAG"])
    job = json.loads(done.stdout)
    assert [r["rank"] for r in job["ranks"]] == [0, 1] and job["world_size"] == 2, done.stderr


def test_a_rank_number_given_twice_is_refused():
    # nothing tells the two apart but the claim on the rank: no Slurm or torchrun id, one world size
    port = free_port()
    env0 = rank_env(0, 3, port)
    rank0 = start(env0, "--json", "--timeout", str(RANK0_WAITS_S))
    try:
        listening_on(port, rank0)
        env1 = rank_env(1, 3, port)
        first = start(env1, "--timeout", "60")
        try:
            claimed(port, "joined/1")
            second = loaderdoc(*CMD[3:], "--timeout", "10", env=rank_env(1, 3, port))
            one_line_error(second, EXIT_USAGE, "rank 1: another process on", f"already joined 127.0.0.1:{port} "
                           "as rank 1", "two processes have RANK=1")
            last = loaderdoc(*CMD[3:], "--timeout", "10", env=rank_env(2, 3, port))
            assert last.returncode == EXIT_OK, last.stderr
        finally:
            assert finish(first).returncode == EXIT_OK
            assert_nothing_left(env1["LOADERDOC_FAULT_TAG"])
    finally:
        done = finish(rank0)
        assert_nothing_left(env0["LOADERDOC_FAULT_TAG"])
    assert [r["rank"] for r in json.loads(done.stdout)["ranks"]] == [0, 1, 2]


def claimed(port: int, key: str) -> None:
    """Wait until a rank has set ``key`` in the roll call of the store at ``port``."""
    from datetime import timedelta

    from torch.distributed import PrefixStore, TCPStore

    client = TCPStore("127.0.0.1", port, None, False, timedelta(seconds=60))
    PrefixStore("loaderdoc/check/0", client).wait([key], timedelta(seconds=60))


def test_job_identity_conflicts_follow_every_field_both_ranks_have():
    # property: for random launcher environments, two ranks conflict exactly when a field both carry differs
    rng = random.Random(32)
    names = ["SLURM_JOB_ID", "SLURM_STEP_ID", "TORCHELASTIC_RUN_ID"]
    for _ in range(500):
        envs = [{n: rng.choice(["1", "2", " 2 ", ""]) for n in names if rng.random() < 0.6} for _ in range(2)]
        launchers, worlds = [rng.choice(["env", "torchrun"]) for _ in range(2)], [rng.choice([2, 3]) for _ in range(2)]
        a, b = (job_identity(envs[i], launchers[i], worlds[i]) for i in range(2))
        shared = [k for k in a if k in b]
        conflict = job_conflict(a, b)
        assert (conflict is not None) == any(a[k] != b[k] for k in shared), (a, b)
        assert job_conflict(a, a) is None
        if conflict:
            assert "\n" not in conflict and "this rank's:" in conflict


# ---- a service on MASTER_PORT that is not a torch store -----------------------------------------
class Service:
    """A TCP service on a free port in this process: ``silent`` accepts and never answers, ``http``
    is Python's HTTP server. ``accepted`` is set at the first connection."""

    def __init__(self, kind: str) -> None:
        self.accepted = threading.Event()
        self.first_accept = 0.0
        service = self

        if kind == "http":
            class Handler(http.server.BaseHTTPRequestHandler):
                def setup(self) -> None:
                    service._note()
                    super().setup()

                def log_message(self, *args) -> None:
                    pass

            self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
            self.port = self.server.server_address[1]
            self._serve = self.server.serve_forever
        else:
            self.sock = socket.create_server(("127.0.0.1", 0))
            self.port = self.sock.getsockname()[1]
            self.held: list[socket.socket] = []
            self._serve = self._accept_forever
        threading.Thread(target=self._serve, daemon=True).start()

    def _note(self) -> None:
        if not self.accepted.is_set():
            self.first_accept = time.monotonic()
            self.accepted.set()

    def _accept_forever(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(conn)
            self._note()

    def close(self) -> None:
        if hasattr(self, "server"):
            self.server.shutdown()
            self.server.server_close()
        else:
            self.sock.close()
            for conn in self.held:
                conn.close()


@pytest.fixture(params=["silent", "http"])
def service(request):
    svc = Service(request.param)
    yield svc
    svc.close()


def test_a_rank_facing_a_service_that_is_not_a_store_ends_in_one_line_within_the_timeout(service):
    env = rank_env(1, 2, service.port)
    proc = start(env, "--timeout", "2")
    done = finish(proc, timeout=60)
    ended = time.monotonic()
    assert_nothing_left(env["LOADERDOC_FAULT_TAG"])
    one_line_error(done, EXIT_USAGE, f"rank 1: 127.0.0.1:{service.port} accepts connections but did not answer as "
                   "a torch store within 2 s", "give the job a free MASTER_PORT")
    assert service.accepted.is_set()
    # torch's handshake began at the first connection: --timeout 2 plus a second's grace, then the exit
    assert ended - service.first_accept < 2 + 1 + 2.5, ended - service.first_accept


def test_rank_0_on_a_port_a_service_holds_says_the_port_is_in_use(service):
    proc = loaderdoc(*CMD[3:], "--timeout", "2", env=rank_env(0, 2, service.port))
    one_line_error(proc, EXIT_USAGE, f"rank 0 cannot serve the job's store: 127.0.0.1:{service.port} is in use",
                   "give the job a free MASTER_PORT")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_to_a_rank_stuck_on_a_mute_service_ends_it_at_once(signum):
    svc = Service("silent")
    env = rank_env(1, 2, svc.port)
    proc = start(env, "--timeout", "600")
    try:
        assert svc.accepted.wait(60), "the rank never connected"
        proc.send_signal(signum)
        sent = time.monotonic()
        done = finish(proc, timeout=30)
        assert time.monotonic() - sent < 5
    finally:
        svc.close()
    assert_nothing_left(env["LOADERDOC_FAULT_TAG"])
    assert done.returncode == EXIT_INTERRUPTED, done.stderr
    assert done.stderr == "loaderdoc: interrupted\n" and done.stdout == ""


# ---- where rank 0's store listens ---------------------------------------------------------------
@pytest.mark.parametrize("addr, expected", [
    ("127.0.0.1", {"127.0.0.1"}),
    ("localhost", {"0.0.0.0", "::"}),  # a host name: torch's own bind, every interface
])
def test_rank_0_store_listens_on_the_address_given_and_sigterm_ends_its_wait(addr, expected):
    port = free_port()
    env = rank_env(0, 2, port, addr=addr)
    proc = start(env, "--timeout", "600")
    try:
        listens = listening_on(port, proc)
        proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        done = finish(proc, timeout=30)
        assert time.monotonic() - sent < 5
    finally:
        if proc.poll() is None:
            proc.kill()
    assert_nothing_left(env["LOADERDOC_FAULT_TAG"])
    assert listens <= expected and listens, listens
    assert (done.returncode, done.stderr) == (EXIT_INTERRUPTED, "loaderdoc: interrupted\n")


def test_the_job_report_says_where_the_store_listened():
    port = free_port()
    env0 = rank_env(0, 2, port)
    rank0 = start(env0, "--timeout", "60")
    try:
        listening_on(port, rank0)
        own = loaderdoc(*CMD[3:], "--timeout", "10", env=rank_env(1, 2, port))
        assert own.returncode == EXIT_OK, own.stderr
    finally:
        done = finish(rank0)
    assert f"store: 127.0.0.1:{port}, served by rank 0 on 127.0.0.1\n" in done.stdout, done.stdout


# ---- a launcher environment or --timeout that makes no sense ------------------------------------
@pytest.mark.parametrize("env, needle", [
    ({"WORLD_SIZE": "100000000"}, "WORLD_SIZE=100000000 is absurd; use a value up to 1,000,000"),
    ({"WORLD_SIZE": "9" * 5000}, "WORLD_SIZE=99999999999999999999... is absurd"),
    ({"WORLD_SIZE": "-3"}, "WORLD_SIZE=-3 is below 1"),
    ({"WORLD_SIZE": "2.5"}, "WORLD_SIZE='2.5' is not a whole number"),
    ({"WORLD_SIZE": "1_0"}, "WORLD_SIZE='1_0' is not a whole number"),
    ({"RANK": "2", "WORLD_SIZE": "2"}, "rank 2 is not below the world size 2"),
    ({"WORLD_SIZE": "4", "GROUP_WORLD_SIZE": "5"}, "5 nodes for 4 ranks"),
    ({"WORLD_SIZE": "4", "GROUP_WORLD_SIZE": "2", "GROUP_RANK": "2"}, "node rank 2 is not below the number of nodes 2"),
    ({"MASTER_PORT": "70000"}, "MASTER_PORT=70000 is not a port (1-65535)"),
], ids=["1e8", "5000-digits", "negative", "fraction", "underscore", "rank-too-big", "more-nodes-than-ranks",
        "node-rank-too-big", "port"])
def test_a_launcher_environment_that_makes_no_sense_is_one_line_exit_3(env, needle):
    full, _ = fault_env({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
                         **env})
    start_s = time.monotonic()
    proc = loaderdoc(*CMD[3:], "--timeout", "2", env=full, timeout=60)
    one_line_error(proc, EXIT_USAGE, f"loaderdoc: error: --distributed: {needle}")
    assert time.monotonic() - start_s < 30  # no MemoryError after minutes


def test_any_world_size_text_is_read_or_refused_in_one_line():
    # property: whatever a launcher writes, read_place returns a world in [1, MAX] or a one-line UserError
    rng = random.Random(32)
    alphabet = "0123456789-+_. e٣x"
    samples = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 14))) for _ in range(400)]
    samples += [str(rng.randint(-10, 10**rng.randint(1, 30))) for _ in range(200)]
    for raw in samples:
        try:
            place = read_place({"RANK": "0", "WORLD_SIZE": raw, "MASTER_ADDR": "a"})
        except UserError as err:
            assert "\n" not in str(err) and "WORLD_SIZE" in str(err), (raw, err)
            continue
        assert 1 <= place.world_size <= MAX_WORLD_SIZE and raw.strip().lstrip("+").isdigit(), raw


@pytest.mark.parametrize("value", ["1e300", "nan", "inf", "-1", "0", "86401", "lots"])
def test_a_timeout_out_of_bounds_is_bad_usage_not_blamed_on_the_store(value):
    env = rank_env(0, 1, free_port())
    proc = loaderdoc(*CMD[3:], "--timeout", value, env=env, timeout=60)
    one_line_error(proc, EXIT_USAGE, "argument --timeout: expected seconds above 0 and at most 86400 (a day), "
                   f"got '{value}'")
    assert "store" not in proc.stderr


def test_the_largest_world_allowed_is_a_roll_call_not_a_traceback():
    # before: WORLD_SIZE=1000000 (the bound) broke the store's connection, exit 70 with a traceback
    env = rank_env(0, 1_000_000, free_port())
    start_s = time.monotonic()
    proc = loaderdoc(*CMD[3:], "--timeout", "2", env=env, timeout=60)
    one_line_error(proc, EXIT_USAGE, "999999 of 1000000 ranks did not join within 2 s: ranks 1-999999",
                   "(joined: 1 rank on ")
    assert time.monotonic() - start_s < 30
