"""redis-server as an in-memory database, loaded by redis-benchmark over 127.0.0.1.

Server: `redis-server --port P --bind 127.0.0.1 --save "" --appendonly no --daemonize no
--disable-thp no` (no persistence, loopback only). Redis >= 6.2 defaults to `disable-thp yes`,
which makes the server switch THP off for itself with prctl(PR_SET_THP_DISABLE) when the host's
THP mode is `always`; hugelab passes `--disable-thp no` so the server follows the host/guest THP
mode of the arm instead, unless the arm says otherwise: `app = { disable-thp = "yes" }` (Redis's
own switch, its default). Evidence for it: the server's THP_enabled and THP, read just before
it stops, judged by hugelab.workloads.redis.thp.
Client: `redis-benchmark -h 127.0.0.1 -p P -q -n N -c C -d D -P pipeline -t set,get --csv`; its
CSV (redis 7) has rps, avg/min/p50/p95/p99/max latency in ms per test. Primary: GET
requests/s (higher). The server side is pluggable like iperf3's (see serverside.ServerSide).

A user's data: `rdb = "/path/dump.rdb"` (an RDB file, e.g. from `redis-cli --rdb` or a SAVE):
each server starts from a copy of it in a private directory (`--dir DIR --dbfilename
dump.rdb`, the original never opened by the server), persistence still off; the keys it loaded
(INFO keyspace, read before any load) are the evidence, in the result's info["rdb"].

Interleaved servers (design "interleaved", hugelab.workloads.interleave): every arm's
redis-server up at once on its own free port, each under its arm's switches; a warm-up run of
`requests` per server measures its rate, and each window then sends as many requests as fill
`window_s` at that rate, so windows stay near their length whichever arm is faster. An arm's
result: each test's requests/s the geometric mean of its windows, latency percentiles the
median of its windows'; its evidence its own server's memory and THP mode, read after the last
window (the host-wide tree holds every arm's server, so it judges none of them).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

from hugelab.errors import ExperimentError, WorkloadError
from hugelab.workloads.base import Place, Target, WorkloadResult, place_of
from hugelab.workloads.guestside import GUEST_DIR
from hugelab.workloads.kind import (
    CLIENT_APART,
    SERVER_PORT,
    Kind,
    ServerInGuest,
    Tool,
    interleaved,
    key,
    keys_of,
    program,
    timeout,
    warm_ops,
)
from hugelab.workloads.process_thp import check_mode
from hugelab.workloads.redis import cost, persist
from hugelab.workloads.redis.bench import TESTS, BenchmarkRuns
from hugelab.workloads.redis.control import DOMAIN_PORT, daemon_argv, guest_argv, ready, stop
from hugelab.workloads.redis.forkdriver import driver as fork_driver
from hugelab.workloads.redis.preload import preload
from hugelab.workloads.redis.rdb import (
    RDB_NAME,
    rdb_keys,
    rdb_leftovers,
    rdb_version,
    record_rdb,
    work_dir,
)
from hugelab.workloads.redis.snapshot import applies as snapshot_applies
from hugelab.workloads.redis.snapshot import keys_loaded, linked, snapshot
from hugelab.workloads.redis.thp import judge
from hugelab.workloads.reqmix import redis_server
from hugelab.workloads.serverkind import Running, ServerKind, version
from hugelab.workloads.serverplace import InDomain
from hugelab.workloads.serverside import LOOPBACK, ServerSide
from hugelab.workloads.toolrun import THP_ONLY_NOTE


@dataclass(frozen=True)
class RedisBenchmark(ServerKind, BenchmarkRuns):
    """redis-server loaded with redis-benchmark; metrics `<test>_rps`, `<test>_p99_ms`, ..."""

    requests: int = key(100_000, "redis-benchmark -n: requests of each test", unit="requests")
    clients: int = key(50, "redis-benchmark -c: parallel connections")
    tests: tuple[str, ...] = key(("set", "get"), "redis-benchmark -t: the commands it sends "
                                 '("set", "get", ...)')
    data_size: int = key(100, "redis-benchmark -d: each value's size (and the preload's)",
                         unit="bytes")
    pipeline: int = key(1, "redis-benchmark -P: requests per round trip")
    keyspace: int | None = key(1_000_000, "redis-benchmark -r: random keys from this many "
                               "(none: one key, which no page size can matter for)", unit="keys")
    threads: int | None = key(None, "redis-benchmark --threads (none: one)")
    port: int | None = key(None, SERVER_PORT)
    client_apart: bool = key(False, CLIENT_APART)
    app: tuple[tuple[str, Any], ...] = key((), "Redis's own settings for the arm, e.g. "
                                           '{ disable-thp = "yes" } (applications.md)')
    server_binary: str = key("redis-server", program("server_binary", "redis-server"))
    benchmark_binary: str = key("redis-benchmark", program("benchmark_binary", "redis-benchmark"))
    timeout_s: float | None = key(None, timeout("a trial's load", "hugelab's"))
    duration_s: float = key(10.0, interleaved("duration_s", "s",
                                              "seconds of load per arm and trial"))
    window_s: float = key(2.0, interleaved("window_s", "s", "each window's length"))
    window_ops: int | None = key(None, interleaved("window_ops", "requests",
                                                   "windows of this many requests instead"))
    warm_ops: int = key(20, warm_ops("requests"))
    server: ServerSide | None = field(default=None, compare=False, repr=False)
    process_thp: str | None = None  # the arm's: every process under hugelab-thp MODE
    rdb: str | None = key(None, "a user's RDB file, loaded from a copy at each server's start")
    persistence: str = key("off", '"off", or "rdb" / "aof": BGSAVE / BGREWRITEAOF during the '
                           "load")
    fork_every_s: float = key(1.0, "persistence: seconds of load before each save", unit="s")
    # the defaults preload 1,000,000 keys of 100 bytes, a 100 MB data set
    preload: bool | None = key(None, "every key of keyspace SET before the load (none: yes, "
                               "unless rdb brings the data)")
    snapshot: bool = key(False, "request-level: each server loads a saved snapshot of the "
                         "preload's key set instead of the client writing every key each "
                         "trial (faster; another memory layout: applications.md)")
    kind: str = field(default="redis", init=False)

    tool: ClassVar[str] = "redis-server"
    domain: ClassVar[InDomain] = InDomain(DOMAIN_PORT, daemon_argv,
                                          log=f"{GUEST_DIR}/redis-server.log")

    def __post_init__(self) -> None:
        validate(self)

    def for_arm(self, arm: Any) -> RedisBenchmark:
        """Persistence and rdb natively only: an arm in a guest is refused before any trial."""
        persist.refuse_guest(self.persistence, self.rdb, arm)
        return self

    @property
    def preloads(self) -> bool:
        """Whether every key is written before the load (see `preload`)."""
        return bool(self.keyspace) and (self.preload if self.preload is not None
                                        else not self.rdb)

    @property
    def snapshots(self) -> bool:
        """Whether request-level servers load a cached snapshot of the preload's key set
        (hugelab.workloads.redis.snapshot) instead of being written a key at a time: natively,
        with no user's RDB and no persistence, where the experiment says `snapshot = true`."""
        return snapshot_applies(self.snapshot, self.preloads, self.rdb, self.persistence)

    @property
    def disable_thp(self) -> bool:
        """Redis's own disable-thp for this arm: hugelab's default is no (see module doc)."""
        value = dict(self.app).get("disable-thp", "no")
        return value in ("yes", True)

    def server_argv(self, port: int, files: Path | None = None) -> list[str]:
        """redis-server on loopback, no save points, THP left to the system mode; in `files`
        a user's RDB copy, loaded at start, and the files of persistence (pure)."""
        rdb = ["--dbfilename", RDB_NAME] if files else []
        return [self.server_binary, "--port", str(port), "--bind", LOOPBACK, *rdb,
                *persist.server_args(self.persistence, files), "--daemonize", "no",
                "--disable-thp", "yes" if self.disable_thp else "no",
                "--protected-mode", "yes"]

    # -- one trial (hugelab.workloads.serverkind.ServerKind.run) ------------------------------
    def own_files(self, target: Target | None) -> Path | None:
        """The server's private directory (a user's RDB, persistence's files); for one of a
        request-level trial's servers (`target` None: the host) the key-set snapshot."""
        if (self.rdb or self.persistence != "off") and target is not None and \
                place_of(target) is not Place.NATIVE:
            raise WorkloadError("redis: rdb and persistence run on the host only for now (the "
                                "files and the fork driver are this host's)")
        if target is None and self.snapshots:
            return linked(snapshot(self.server_binary, self.keyspace or 0, self.data_size))
        return work_dir(self.rdb, self.persistence)

    def drop_files(self, files: Path | None) -> None:
        persist.remove(files)

    def load(self, client: Target, port: int, files: Path | None) -> Any:
        keys = self.filled(port, files, client)
        with fork_driver(port, self.persistence, self.fork_every_s) as saving:
            res = client.exec(self.benchmark_argv(port), timeout=self.exec_timeout())
        return res, keys, saving.outcome() if saving else None

    def loaded(self, load: Any, output: str, client: Target) -> WorkloadResult:
        res, keys, saves = load
        result = self.parse(res, output)
        record_rdb(result, self.rdb, keys)
        if saves is not None:
            saves.record(result, self.persistence, self.fork_every_s)
        result.info["benchmark_version"] = version([self.benchmark_binary, "--version"],
                                                   r"redis-benchmark (\S+)", client)
        if result.info["version"] is None:
            result.info["version"] = result.info["benchmark_version"]
        return result

    def filled(self, port: int, rdb_dir: Path | None, client: Target | None = None) -> int | None:
        """The keys loaded from a user's RDB (None without one); then the preload, if any, by
        redis-cli where the load's client runs (`client`; None: the host)."""
        keys = rdb_keys(port, self.rdb, rdb_dir if self.rdb else None)
        if self.preloads:
            cli = str(Path(self.benchmark_binary).with_name("redis-cli"))
            preload(client, cli, port, self.keyspace or 0, self.data_size)
        return keys

    def describe(self, result: WorkloadResult, backing: str) -> None:
        """Redis's own switch, when the arm set it, for the app evidence rule (judge)."""
        if self.app:
            result.evidence["redis"] = {"disable_thp": self.disable_thp,
                                        "process_thp": self.process_thp}
        result.info["backing"] = backing
        result.info["backing_note"] = (THP_ONLY_NOTE + (
            "; the server runs with --disable-thp yes: it opts itself out of THP under host "
            "THP always" if self.disable_thp else
            "; the server runs with --disable-thp no so it does not opt itself out of THP"))

    # -- interleaved servers (hugelab.workloads.requests; windows: BenchmarkRuns) -------------
    def fill(self, srv: Running) -> None:
        """A request-level server's data: the keys its snapshot brought (checked: every key
        of the keyspace), else as `filled` says."""
        if self._from_snapshot(srv):
            srv.loaded = keys_loaded(srv.port, self.keyspace or 0)
        else:
            srv.loaded = self.filled(srv.port, srv.files)

    def _from_snapshot(self, srv: Running) -> bool:
        """Whether this server's keys came from the key-set snapshot (own_files linked it)."""
        return srv.files is not None and self.snapshots

    def served(self, result: WorkloadResult, srv: Running) -> None:
        result.info.update({"tool": "hugelab-reqmix", "tests": list(self.tests), "version":
                            version([self.server_binary, "--version"], r"v=(\d+\.\d+\.\d+)")})
        if self._from_snapshot(srv):
            result.info["preload"] = {"from": "snapshot", "keys_loaded": srv.loaded}
        else:
            record_rdb(result, self.rdb, srv.loaded)

    def reqmix_server(self, host: str, port: int) -> str:
        return redis_server(host, port)

    def request_load(self) -> dict[str, Any]:
        """GET and SET in the proportion of `tests`, on keyspace keys of data_size bytes,
        every key written first (a GET finds its value)."""
        sets = sum(t == "set" for t in self.tests) / max(1, sum(t in ("get", "set")
                                                               for t in self.tests))
        return {"keyspace": self.keyspace or 10000, "value_size": self.data_size,
                "set_ratio": sets, "preload": not self.snapshots}


def validate(w: RedisBenchmark) -> None:
    """A redis workload's keys; ExperimentError naming the key."""
    tests = tuple(w.tests) if isinstance(w.tests, list | tuple) else (w.tests,)
    object.__setattr__(w, "tests", tests)
    bad = [t for t in tests if t not in TESTS]
    if bad or not tests:
        raise ExperimentError(f"redis: unknown test(s) {', '.join(bad) or '(none given)'}; "
                              f"known: {', '.join(TESTS)}")
    for name in ("requests", "clients", "data_size", "pipeline"):
        if getattr(w, name) < 1:
            raise ExperimentError(f"redis: {name} must be at least 1")
    if w.duration_s < 1 or w.window_s < 1:
        raise ExperimentError("redis: duration_s and window_s are seconds, at least 1")
    if w.window_ops is not None and (w.window_ops < 1 or w.warm_ops < 0):
        raise ExperimentError("redis: window_ops is at least 1 and warm_ops at least 0")
    check_mode("redis", w.process_thp)
    if w.rdb is not None:
        object.__setattr__(w, "rdb", os.path.abspath(w.rdb))
        try:
            with open(w.rdb, "rb") as f:
                rdb_version(f.read(9))
        except (OSError, ValueError) as exc:
            raise ExperimentError(f"redis: rdb {w.rdb}: {exc}") from None
    persist.check(w.persistence, w.fork_every_s, bool(w.preload), w.keyspace)


load_seconds = partial(cost.load_seconds, RedisBenchmark)  # the kind's Kind.seconds


KIND = Kind(
    keys=keys_of(RedisBenchmark),
    name="redis", workload=RedisBenchmark,
    summary="redis-server loaded by redis-benchmark, with Redis's own disable-thp per arm",
    role="server", where=frozenset({"host", "guest", "domain", "interleaved"}),
    tools=(Tool("redis-server", "redis-server"), Tool("redis-benchmark", "redis-tools"),
           Tool("redis-cli", "redis-tools")),
    server=ServerInGuest("redis-server", 6379, ready, stop, guest_argv),
    duration=("timeout_s", None), seconds=load_seconds, judge=judge,
    guest_build=partial(cost.guest_build, RedisBenchmark),
    fill_seconds=partial(cost.fill_seconds, RedisBenchmark),
    interleave=persist.interleave_problem, leftovers=rdb_leftovers,
    app={"disable-thp": ("yes", "no", True, False)})
