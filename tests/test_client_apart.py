"""`client_apart` (issue 39 item 4, the production-shaped design): in a paired trial on this
host, the server's whole tree runs on every CPU but the last and its load generator alone on
the last, as a client on another machine would load it. Checked against the kernel's own word
(`Cpus_allowed_list` in /proc/PID/status of the running server, its later children and the
client), read by this test while the trial runs; refused where it cannot hold."""

from __future__ import annotations

import os
import shutil
import threading
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest

from hugelab.errors import ExperimentError
from hugelab.experiment.parse import parse_experiment
from hugelab.workloads.base import ExecResult
from hugelab.workloads.postgres.cluster import installed as pg_installed
from hugelab.workloads.registry import build_for
from hugelab.workloads.servercpu import PinnedTarget, pinning

pytestmark = pytest.mark.beside  # lock-free tests here run beside the machine lane (docs/testing.md)

BASE = """
name = "apart"
seed = 1
blocks = 1
design = "{design}"
baseline = "a"

[workload]
kind = "redis"
client_apart = true
requests = 2000

[[arms]]
name = "a"
backing = "4k"

[[arms]]
name = "b"
backing = "thp"
{vm}
"""


def experiment(design: str = "paired", vm: str = "") -> object:
    text = BASE.format(design=design, vm=vm)
    return parse_experiment(tomllib.loads(text), text)


class Echo:
    name = "native"

    def __init__(self) -> None:
        self.seen: list[list[str]] = []

    def exec(self, argv: list[str], *, timeout: float | None = None) -> ExecResult:
        self.seen.append(list(argv))
        return ExecResult(list(argv), 0, "out", "", 0.1)


def test_the_client_runs_under_taskset_and_its_result_names_the_argv_it_was_given():
    inner = Echo()
    r = PinnedTarget(inner, [3, 1]).exec(["redis-benchmark", "-n", "5"])
    assert inner.seen == [["taskset", "-c", "3,1", "redis-benchmark", "-n", "5"]]
    assert r.argv == ["redis-benchmark", "-n", "5"] and r.stdout == "out"


def test_a_paired_host_experiment_with_client_apart_builds():
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU: client_apart is refused here (its own test below)")
    workload, _ = build_for(experiment())  # type: ignore[arg-type]
    assert workload.client_apart is True  # type: ignore[attr-defined]


def test_client_apart_is_refused_with_design_interleaved():
    with pytest.raises(ExperimentError, match='client_apart is for design "paired"') as e:
        build_for(experiment(design="interleaved"))  # type: ignore[arg-type]
    assert e.value.key == "client_apart"


def test_client_apart_is_refused_for_an_arm_in_a_guest():
    with pytest.raises(ExperimentError, match="arm 'b': client_apart pins this host") as e:
        build_for(experiment(vm='vm = { backing = "anon" }'))  # type: ignore[arg-type]
    assert e.value.arm == "b"


def test_client_apart_is_refused_where_this_process_has_one_cpu(monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0})
    with pytest.raises(ExperimentError, match="needs two CPUs"):
        build_for(experiment())  # type: ignore[arg-type]


def cpus_of(pid: int) -> str | None:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    return next(line.split()[1] for line in text.splitlines()
                if line.startswith("Cpus_allowed_list:"))


def comm(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def cwd(pid: str) -> str:
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return ""


def descends_from_me(pid: int) -> bool:
    from tests.hostguard import parent_pid
    for _ in range(32):  # a process tree is never this deep here
        if pid <= 1:
            return False
        if pid == os.getpid():
            return True
        pid = parent_pid(pid)
    return False


def the_trials(name: str, pid: str) -> bool:
    """Whether a process is the trial's: a PostgreSQL process works in its data directory, and
    the trial's cluster lies under hugelab's own directory (the suite's session server, a
    PostgreSQL store, does not), in a copy this process made (its owner record names this
    pid); a client is this process's descendant. The machine lane's PostgreSQL trials and their
    clients run beside this test."""
    from hugelab import owned
    from hugelab.workloads.postgres.cluster import work_path
    if name != "postgres":  # a client: this process's child or grandchild
        return descends_from_me(int(pid))
    here, work = Path(cwd(pid)), work_path()
    if not here.is_relative_to(work) or here == work:
        return False
    top = work / here.relative_to(work).parts[0]
    return owned.owner_record(top).get("owner_pid") == os.getpid()


def watch(names: tuple[str, str], stop: threading.Event, seen: dict[str, set[str]]) -> None:
    """The CPU lists of the trial's processes named (server, client: the comm starts so)
    while the client runs: the server is pinned once it is up, before its load starts."""
    while not stop.is_set():
        now: dict[str, set[str]] = {}
        for pid in (p for p in os.listdir("/proc") if p.isdigit()):
            name = comm(pid)
            hit = next((n for n in names if name.startswith(n)), None)
            if hit is not None and the_trials(hit, pid) and \
                    (cpus := cpus_of(int(pid))) is not None:
                now.setdefault(hit, set()).add(cpus)
        if names[1] in now:
            for k, v in now.items():
                seen.setdefault(k, set()).update(v)
        stop.wait(0.02)


def cpu_list(cpus: list[int]) -> set[str]:
    """The spellings the kernel may use for a CPU set: '1', '0-1' or '0,1'."""
    out = {",".join(map(str, cpus))}
    if len(cpus) > 1 and cpus == list(range(cpus[0], cpus[-1] + 1)):
        out.add(f"{cpus[0]}-{cpus[-1]}")
    return out


def run_watched(workload: object, names: tuple[str, str]) -> tuple[object, dict[str, set[str]]]:
    from hugelab.trial.native import NativeTarget
    stop, seen = threading.Event(), {}  # type: ignore[var-annotated]
    t = threading.Thread(target=watch, args=(names, stop, seen), daemon=True)
    t.start()
    try:
        result = workload.run(NativeTarget(), "4k")  # type: ignore[attr-defined]
    finally:
        stop.set()
        t.join()
    return result, seen


needs_two = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")


@needs_two
@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")
@pytest.mark.server
def test_redis_server_and_benchmark_run_on_cpus_of_their_own():
    from hugelab.workloads.redis import RedisBenchmark
    pins = pinning(sorted(os.sched_getaffinity(0)))
    wl = RedisBenchmark(requests=20000, keyspace=1000, client_apart=True)
    result, seen = run_watched(wl, ("redis-server", "redis-benchmark"))
    assert result.info["client_apart"] == pins  # type: ignore[attr-defined]
    assert seen.get("redis-server") and seen["redis-server"] <= cpu_list(pins["servers"]), seen
    assert seen.get("redis-benchmark") and seen["redis-benchmark"] <= cpu_list(pins["client"])
    assert result.value > 0  # type: ignore[attr-defined]


@needs_two
@pytest.mark.skipif(not pg_installed(), reason="Debian package postgresql not installed")
@pytest.mark.server
@pytest.mark.slow
def test_postgres_backends_forked_later_inherit_the_servers_cpus_and_pgbench_has_its_own():
    """A backend is forked per connection after the pinning: the tree's later children must
    inherit the server's CPUs (the kernel's CPU list of each backend, read while it serves)."""
    from hugelab.workloads.postgres.workload import Postgres
    pins = pinning(sorted(os.sched_getaffinity(0)))
    wl = Postgres(scale=1, clients=2, threads=1, duration_s=2, warmup_s=0,
                  client_apart=True).for_arm(SimpleNamespace(name="off", backing="4k"))
    result, seen = run_watched(wl, ("postgres", "pgbench"))
    assert result.info["client_apart"] == pins  # type: ignore[attr-defined]
    assert seen.get("postgres") and seen["postgres"] <= cpu_list(pins["servers"]), seen
    assert seen.get("pgbench") and seen["pgbench"] <= cpu_list(pins["client"]), seen
    assert result.metrics["tps"] > 0  # type: ignore[attr-defined]
