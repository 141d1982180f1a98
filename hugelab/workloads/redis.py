"""redis-server as an in-memory database, loaded by redis-benchmark over 127.0.0.1.

Server: `redis-server --port P --bind 127.0.0.1 --save "" --appendonly no --daemonize no
--disable-thp no` (no persistence, loopback only). Redis >= 6.2 defaults to `disable-thp yes`,
which makes the server switch THP off for itself with prctl(PR_SET_THP_DISABLE) when the host's
THP mode is `always`; hugelab passes `--disable-thp no` so the server follows the host/guest THP
mode of the arm instead, unless the arm says otherwise: `app = { disable-thp = "yes" }` (Redis's
own switch, its default). Evidence for it: the server's THP_enabled and THP, read just before
it stops (hugelab.trial.appevidence.check_redis).
Client: `redis-benchmark -h 127.0.0.1 -p P -q -n N -c C -d D -P pipeline -t set,get --csv`; its
CSV (redis 7) has rps, avg/min/p50/p95/p99/max latency in ms per test. Primary: GET
requests/s (higher). The server side is pluggable like iperf3's (see command.ServerSide).

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

import contextlib
import csv
import io
import os
import re
import shutil
import socket
import statistics
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hugelab import proc
from hugelab.checks import CONTRADICTED, NOT_APPLICABLE, VERIFIED, Check
from hugelab.errors import ExperimentError, WorkloadError
from hugelab.units import amount
from hugelab.workloads import interleave
from hugelab.workloads import redis_persist as persist
from hugelab.workloads.base import ExecResult, Place, Target, WorkloadResult, place_of
from hugelab.workloads.command import (
    LOOPBACK,
    THP_ONLY_NOTE,
    LocalServer,
    ServerHandle,
    ServerSide,
    check_backing,
    check_exit,
    default_server,
    exchange,
    first_version,
    server_memory,
    tail,
)
from hugelab.workloads.guestside import (
    GUEST_DIR,
    DomainServers,
    in_domain,
    refuse_process_thp,
)
from hugelab.workloads.kind import Key, Kind, ServerInGuest, Tool
from hugelab.workloads.process_thp import check_mode, target_for, wrap
from hugelab.workloads.reqmix import redis_server
from hugelab.workloads.servermem import server_tree

TESTS = ("ping_inline", "ping_mbulk", "set", "get", "incr", "lpush", "rpush", "lpop", "rpop",
         "sadd", "hset", "spop", "zadd", "zpopmin", "lrange", "lrange_100", "lrange_300",
         "lrange_500", "lrange_600", "mset", "xadd")
_COLUMNS = {"rps": "rps", "avg_latency_ms": "avg_ms", "min_latency_ms": "min_ms",
            "p50_latency_ms": "p50_ms", "p95_latency_ms": "p95_ms", "p99_latency_ms": "p99_ms",
            "max_latency_ms": "max_ms"}


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def parse_csv(text: str) -> dict[str, dict[str, float]]:
    """Per test ('set', 'get', 'lrange_100_first_100_elements', ...) its rps and latencies.

    Redis 7 prints a header row; redis 6 and older print "test","rps" rows without one."""
    rows = [r for r in csv.reader(io.StringIO(text.strip())) if r]
    if not rows:
        raise WorkloadError("redis-benchmark printed no CSV")
    header = ["test", "rps"]
    if rows[0] and rows[0][0] == "test":
        header, rows = rows[0], rows[1:]
    out: dict[str, dict[str, float]] = {}
    for row in rows:
        if len(row) != len(header):
            continue
        values: dict[str, float] = {}
        for col, cell in zip(header[1:], row[1:], strict=True):
            try:
                values[_COLUMNS.get(col, _slug(col))] = float(cell)
            except ValueError:
                continue
        if "rps" in values:
            out[_slug(row[0])] = values
    if not out:
        raise WorkloadError(f"redis-benchmark CSV has no test rows\n  {tail(text, 5)}")
    return out


# -- a user's RDB file: copied into a private directory, loaded at start, persistence off --------
RDB_NAME = "dump.rdb"
RDB_PREFIX = persist.PRIVATE_PREFIX
RDB_WORK = persist.PRIVATE_WORK
LOAD_TIMEOUT_S = 600.0


def rdb_version(head: bytes) -> int:
    """The RDB format version from a file's first bytes (`REDIS0011`) (pure); ValueError."""
    if head[:5] != b"REDIS" or not head[5:9].isdigit():
        raise ValueError("not a Redis RDB file (it does not start with REDIS and a version)")
    return int(head[5:9])


def keyspace_keys(info: str) -> int:
    """The keys of every database in `INFO keyspace` (`db0:keys=12,expires=0,...`) (pure)."""
    return sum(int(m.group(1)) for m in re.finditer(r"^db\d+:keys=(\d+)", info, re.MULTILINE))


def rdb_copy(rdb: str) -> Path:
    """A private directory (0700, named by this process) holding a copy of the RDB file."""
    d = persist.private_dir()
    shutil.copyfile(rdb, d / RDB_NAME)
    return d


def work_dir(rdb: str | None, persistence: str) -> Path | None:
    """The server's private directory: a copy of the user's RDB, and where persistence writes
    its files; None where neither needs one."""
    if rdb:
        return rdb_copy(rdb)
    return persist.private_dir() if persistence != "off" else None


def reply_complete(data: bytes) -> bool:
    """Whether `data` holds a whole reply: a status or error line, or a bulk string (pure)."""
    head, sep, body = data.partition(b"\r\n")
    if not sep:
        return False
    return not head.startswith(b"$") or len(body) >= int(head[1:]) + 2


def info_section(port: int, section: str, timeout: float = 5.0) -> str:
    """`INFO section` of the server on 127.0.0.1:port, read to the end of its reply."""
    cmd = f"*2\r\n$4\r\nINFO\r\n${len(section)}\r\n{section}\r\n".encode()
    data = b""
    with socket.create_connection((LOOPBACK, port), timeout=timeout) as s:
        s.sendall(cmd)
        while not reply_complete(data) and (chunk := s.recv(65536)):
            data += chunk
    return data.decode(errors="replace")


def loaded_keys(port: int, timeout: float = LOAD_TIMEOUT_S) -> int:
    """The keys a server holds once it has finished loading its RDB file."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError):  # busy loading a large file: asked again
            if "loading:0" in info_section(port, "persistence"):
                return keyspace_keys(info_section(port, "keyspace"))
        if time.monotonic() > deadline:
            raise WorkloadError(f"redis-server was still loading its RDB after {timeout:.0f} s")
        time.sleep(0.05)


def rdb_keys(port: int, rdb: str | None, rdb_dir: Path | None) -> int | None:
    """The keys a server loaded from the user's RDB (None without one); WorkloadError when it
    holds none."""
    if rdb_dir is None:
        return None
    keys = loaded_keys(port)
    if keys <= 0:
        raise WorkloadError(f"redis-server loaded no keys from {rdb}",
                            hint="the file holds no keys, or not for this server")
    return keys


def record_rdb(result: WorkloadResult, rdb: str | None, keys: int | None) -> None:
    if keys is not None:  # INFO keyspace before any load: what the file brought
        result.info["rdb"] = {"file": rdb, "keys_loaded": keys}


def rdb_leftovers(work: Path = RDB_WORK) -> list[str]:
    """RDB copies whose run is gone (after a kill): removed, for `hugelab recover`."""
    gone = []
    for d in sorted(work.glob(f"{RDB_PREFIX}*")):
        pid = d.name[len(RDB_PREFIX):].split("-")[0]
        if d.is_dir() and pid.isdigit() and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(d, ignore_errors=True)
            gone.append(str(d))
    return gone


@dataclass(frozen=True)
class RedisBenchmark:
    """redis-server loaded with redis-benchmark; metrics `<test>_rps`, `<test>_p99_ms`, ..."""

    requests: int = 100_000
    clients: int = 50
    tests: tuple[str, ...] = ("set", "get")
    data_size: int = 100          # -d: bytes per value
    pipeline: int = 1
    keyspace: int | None = 1_000_000  # -r: random keys from this many; None = one key
    threads: int | None = None   # redis-benchmark --threads
    port: int | None = None
    app: tuple[tuple[str, Any], ...] = ()
    server_binary: str = "redis-server"
    benchmark_binary: str = "redis-benchmark"
    timeout_s: float | None = None
    duration_s: float = 10.0  # design "interleaved": seconds of load per arm and trial
    window_s: float = 2.0     # design "interleaved": each window's length
    window_ops: int | None = None  # design "interleaved": windows of this many requests
    warm_ops: int = 20        # per window and connection, untimed (the other arm's caches)
    server: ServerSide | None = field(default=None, compare=False, repr=False)
    process_thp: str | None = None  # the arm's: every process under hugelab-thp MODE
    rdb: str | None = None  # a user's RDB file: loaded at each server's start from a copy
    persistence: str = "off"  # "rdb" / "aof": BGSAVE / BGREWRITEAOF during the load
    fork_every_s: float = 1.0  # persistence: seconds of load before each save
    # every key of keyspace SET (data_size bytes) before the load; None: yes, unless an rdb
    # brings the data (the defaults: 1,000,000 keys of 100 bytes, a 100 MB data set)
    preload: bool | None = None
    kind: str = field(default="redis", init=False)

    def __post_init__(self) -> None:
        validate(self)

    def for_arm(self, arm: Any) -> RedisBenchmark:
        """Persistence natively only: an arm in a guest is refused before any trial."""
        persist.refuse_guest(self.persistence, arm)
        return self

    @property
    def preloads(self) -> bool:
        """Whether every key is written before the load (see `preload`)."""
        return bool(self.keyspace) and (self.preload if self.preload is not None
                                        else not self.rdb)

    @property
    def disable_thp(self) -> bool:
        """Redis's own disable-thp for this arm: hugelab's default is no (see module doc)."""
        value = dict(self.app).get("disable-thp", "no")
        return value in ("yes", True)

    @property
    def primary(self) -> str:
        return "get_rps" if "get" in self.tests else f"{self.tests[0]}_rps"

    def server_argv(self, port: int, rdb_dir: Path | None = None) -> list[str]:
        """redis-server on loopback, no save points, THP left to the system mode; in
        `rdb_dir` a user's RDB copy, loaded at start, and the files of persistence (pure)."""
        rdb = ["--dbfilename", RDB_NAME] if rdb_dir else []
        return [self.server_binary, "--port", str(port), "--bind", LOOPBACK, *rdb,
                *persist.server_args(self.persistence, rdb_dir), "--daemonize", "no",
                "--disable-thp", "yes" if self.disable_thp else "no",
                "--protected-mode", "yes"]

    def benchmark_argv(self, port: int, requests: int | None = None) -> list[str]:
        """redis-benchmark against 127.0.0.1:port with CSV output, `requests` per test
        (default: the workload's) (pure)."""
        argv = [self.benchmark_binary, "-h", LOOPBACK, "-p", str(port), "-q",
                "-n", str(requests or self.requests), "-c", str(self.clients), "-d", str(self.data_size),
                "-P", str(self.pipeline), "-t", ",".join(self.tests), "--csv"]
        if self.keyspace is not None:
            argv += ["-r", str(self.keyspace)]
        if self.threads is not None:
            argv += ["--threads", str(self.threads)]
        return argv

    def exec_timeout(self) -> float:
        if self.timeout_s is not None:
            return self.timeout_s
        return 60.0 + self.requests * len(self.tests) / 2000.0

    def parse(self, res: ExecResult, server_output: str = "") -> WorkloadResult:
        """Metrics of one finished redis-benchmark run (pure); WorkloadError when it failed."""
        check_exit(res, "redis-benchmark")
        per_test = parse_csv(res.stdout)
        metrics = {f"{test}_{k}": v for test, vals in per_test.items() for k, v in vals.items()}
        if self.primary not in metrics:
            raise WorkloadError(f"redis-benchmark CSV lacks {self.primary}; "
                                f"tests seen: {', '.join(per_test)}")
        metrics["wall_s"] = res.wall_s
        info: dict[str, Any] = {
            "tool": "redis-benchmark",
            "version": first_version(server_output, r"(?:Redis version|v)=(\d+\.\d+\.\d+)"),
            "tests": list(self.tests),
            "warnings": [ln.strip() for ln in res.stderr.splitlines() if ln.strip()],
        }
        return WorkloadResult(metrics=metrics, primary=self.primary, unit="requests/s",
                              better="higher", info=info)

    def run(self, target: Target, backing: str) -> WorkloadResult:
        check_backing(backing)
        if in_domain(target):  # the guest's own redis-server, redis-benchmark beside it
            refuse_process_thp("redis", self.process_thp)
            side: ServerSide = DomainServers(target, self.port or DOMAIN_PORT,  # type: ignore[arg-type]
                                             daemon_argv, log=f"{GUEST_DIR}/redis-server.log")
        else:
            side = default_server(self.server, target, "redis-server", self.port)
        if (self.rdb or self.persistence != "off") and place_of(target) is not Place.NATIVE:
            raise WorkloadError("redis: rdb and persistence run on the host only for now (the "
                                "files and the fork driver are this host's)")
        rdb_dir = work_dir(self.rdb, self.persistence)
        try:
            return self._run(target, side, backing, rdb_dir)
        finally:
            persist.remove(rdb_dir)

    def _run(self, target: Target, side: ServerSide, backing: str,
             rdb_dir: Path | None) -> WorkloadResult:
        handle = side.start(lambda port: wrap(self.server_argv(port, rdb_dir), self.process_thp,
                                              target), "redis-server")
        target = target_for(target, self.process_thp)
        server_out = ""
        memory: dict[str, object] = {}
        try:
            keys = self.fill(handle.client_port, rdb_dir, target)
            with persist.driver(handle.client_port, self.persistence,
                                self.fork_every_s) as saving:
                res = target.exec(self.benchmark_argv(handle.client_port),
                                  timeout=self.exec_timeout())
            saves = saving.outcome() if saving else None
            memory = server_memory(handle)
        finally:
            server_out = handle.stop()
        result = self.parse(res, server_out)
        record_rdb(result, self.rdb, keys)
        if saves is not None:
            saves.record(result, self.persistence, self.fork_every_s)
        result.evidence["server_output_tail"] = server_out
        result.evidence["server"] = memory
        if in_domain(target) and memory:  # the daemon's own: the guest's tree is the client's
            result.evidence["tree"] = server_tree("redis-server", memory, f"guest {target.name}")
        if self.app:  # the arm set Redis's own switch: the app evidence rule judges it
            result.evidence["redis"] = {"disable_thp": self.disable_thp,
                                        "process_thp": self.process_thp}
        ver = target.exec([self.benchmark_binary, "--version"])
        result.info["benchmark_version"] = first_version(ver.stdout, r"redis-benchmark (\S+)")
        if result.info["version"] is None:
            result.info["version"] = result.info["benchmark_version"]
        self._describe(result, backing)
        return result

    def fill(self, port: int, rdb_dir: Path | None, client: Target | None = None) -> int | None:
        """The keys loaded from a user's RDB (None without one); then the preload, if any, by
        redis-cli where the load's client runs (`client`; None: the host)."""
        keys = rdb_keys(port, self.rdb, rdb_dir if self.rdb else None)
        if self.preloads:
            cli = str(Path(self.benchmark_binary).with_name("redis-cli"))
            persist.preload(client, cli, port, self.keyspace or 0, self.data_size)
        return keys

    def _describe(self, result: WorkloadResult, backing: str) -> None:
        result.info["backing"] = backing
        result.info["backing_note"] = (THP_ONLY_NOTE + (
            "; the server runs with --disable-thp yes: it opts itself out of THP under host "
            "THP always" if self.disable_thp else
            "; the server runs with --disable-thp no so it does not opt itself out of THP"))

    # -- interleaved servers (hugelab.workloads.interleave.ServerWorkload) ---------------------
    def start(self, backing: str) -> RedisServer:
        """This arm's redis-server, up on a free loopback port (several run at once)."""
        check_backing(backing)
        rdb_dir = work_dir(self.rdb, self.persistence)
        try:
            handle = LocalServer().start(
                lambda port: wrap(self.server_argv(port, rdb_dir), self.process_thp),
                "redis-server")
        except BaseException:
            persist.remove(rdb_dir)
            raise
        srv = RedisServer(handle, rdb_dir=rdb_dir)
        try:
            srv.keys = self.fill(srv.handle.client_port, rdb_dir)
        except BaseException:
            self.stop(srv)
            raise
        return srv

    def _bench(self, target: Target, srv: RedisServer, requests: int) -> WorkloadResult:
        client = target_for(target, self.process_thp)
        res = client.exec(self.benchmark_argv(srv.handle.client_port, requests),
                          timeout=self.exec_timeout())
        return self.parse(res)

    def warm(self, target: Target, srv: RedisServer) -> None:
        """A first run of `requests` per test: the server warms, and its rate sizes the
        windows."""
        res = self._bench(target, srv, self.requests)
        srv.rate = self.requests / max(res.metrics["wall_s"], 1e-3)  # per test's requests/s

    def window(self, target: Target, srv: RedisServer, seconds: float
               ) -> tuple[dict[str, float], np.ndarray]:
        """One redis-benchmark run sized to last about `seconds` at the warm-up's rate."""
        n = max(self.clients, round(srv.rate * seconds)) if srv.rate else self.requests
        return self._bench(target, srv, n).metrics, np.empty(0)

    def finish(self, srv: RedisServer, windows: list[dict[str, float]],
               latencies: np.ndarray, backing: str) -> WorkloadResult:
        """The arm's result from its windows, and its own server's evidence, read now."""
        values = [w[self.primary] for w in windows]
        result = self.request_result(srv, window_metrics(windows), backing, self.primary)
        result.info.update({"tool": "redis-benchmark", "tests": list(self.tests),
                            "reps": {"n": len(values), "values": values, "unit": "window",
                                     "wall_s": [w["wall_s"] for w in windows]}})
        return result

    def request_result(self, srv: RedisServer, metrics: dict[str, float], backing: str,
                       primary: str = "ops_per_s") -> WorkloadResult:
        """The arm's result: `metrics`, and its own server's evidence, read now."""
        memory = server_memory(srv.handle)
        evidence: dict[str, Any] = {"server": memory}
        if memory:  # judged alone: the host-wide tree holds every arm's server
            evidence["tree"] = server_tree("redis-server", memory)
        if self.app:
            evidence["redis"] = {"disable_thp": self.disable_thp, "process_thp": self.process_thp}
        ver = proc.run([self.server_binary, "--version"], check=False, timeout=10)
        info: dict[str, Any] = {"tool": "hugelab-reqmix", "tests": list(self.tests),
                                "version": first_version(ver.stdout, r"v=(\d+\.\d+\.\d+)")}
        result = WorkloadResult(metrics=metrics, primary=primary, unit="requests/s",
                                better="higher", evidence=evidence, info=info)
        self._describe(result, backing)
        record_rdb(result, self.rdb, srv.keys)
        return result

    def request_server(self, srv: RedisServer) -> str:
        return redis_server(LOOPBACK, srv.handle.client_port)

    def request_load(self) -> dict[str, Any]:
        """GET and SET in the proportion of `tests`, on keyspace keys of data_size bytes,
        every key written first (a GET finds its value)."""
        sets = sum(t == "set" for t in self.tests) / max(1, sum(t in ("get", "set")
                                                               for t in self.tests))
        return {"keyspace": self.keyspace or 10000, "value_size": self.data_size,
                "set_ratio": sets, "preload": True}

    def server_pid(self, srv: RedisServer) -> int:
        return int(srv.handle.proc.pid)  # type: ignore[attr-defined]

    def stop(self, srv: RedisServer) -> None:
        try:
            srv.handle.stop()
        finally:
            persist.remove(srv.rdb_dir)


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



@dataclass
class RedisServer:
    """One arm's running server in an interleaved trial, and its warm-up rate."""

    handle: ServerHandle
    rate: float = 0.0  # requests per second of each test, measured in the warm-up
    rdb_dir: Path | None = None  # the private copy of the user's RDB file
    keys: int | None = None      # the keys the server loaded from it


def window_metrics(windows: list[dict[str, float]]) -> dict[str, float]:
    """An arm's metrics from its windows (pure): requests/s the geometric mean (so two arms'
    log-ratio is the mean of their windows'), latencies the median, wall_s the sum."""
    out: dict[str, float] = {}
    for key in windows[0]:
        values = [w[key] for w in windows if key in w]
        if key.endswith("_rps"):
            out[key] = interleave.geomean(values)
        elif key == "wall_s":
            out[key] = sum(values)
        else:
            out[key] = statistics.median(values)
    out["duration_s"] = out.get("wall_s", 0.0)
    return out


def check_redis(disable_thp: bool, process_thp: str | None, server: dict[str, Any]) -> Check:
    """Redis's own disable-thp from its server process, read just before it stopped: `yes`
    switches THP off for itself (prctl, so THP_enabled 0) when the host's mode is `always`,
    after start-up (what it faulted in THP before stays THP: measured 6 MiB with Redis 7.0);
    `no` keeps it (THP_enabled 1, unless the arm's process_thp wraps it)."""
    enabled = server.get("thp_enabled")
    huge = int(server.get("anon_huge_kb", 0))
    if enabled is None:
        return Check(NOT_APPLICABLE, "this kernel does not report THP_enabled per process "
                                     "(Linux 6.0+)", "app")
    if disable_thp:
        if enabled == 0:
            return Check(VERIFIED, "disable-thp yes: redis-server switched THP off for itself "
                                   f"(THP_enabled 0; {amount(huge)} faulted in THP before "
                                   "it did stays THP)", "app")
        if huge:
            return Check(CONTRADICTED, f"disable-thp yes, yet redis-server has {amount(huge)} "
                                       "in THP", "app")
        return Check(NOT_APPLICABLE, "disable-thp yes: redis-server kept THP_enabled 1 (it "
                                     "switches THP off only under host THP always) and has no "
                                     "THP", "app")
    if enabled == 0 and process_thp != "never":
        return Check(CONTRADICTED, "disable-thp no, yet redis-server runs with THP_enabled 0",
                     "app")
    return Check(VERIFIED, f"disable-thp no: redis-server kept THP "
                           f"(THP_enabled {enabled}, {amount(huge)} in THP)", "app")


def judge(evidence: Mapping[str, Any]) -> Check | None:
    """The app layer from what a trial recorded: Redis's switch (evidence["redis"]) against its
    server's own process, read just before it stopped (evidence["server"])."""
    redis = evidence.get("redis")
    if not isinstance(redis, dict):
        return None
    server = evidence.get("server")
    if not server:
        return Check(NOT_APPLICABLE, "redis-server's memory was not read (it ended first, "
                                     "or runs where hugelab cannot see)", "app")
    return check_redis(bool(redis.get("disable_thp")), redis.get("process_thp"), server)


_PING = b"*1\r\n$4\r\nPING\r\n"
_SHUTDOWN = b"*2\r\n$8\r\nSHUTDOWN\r\n$6\r\nNOSAVE\r\n"


def ready(port: int) -> bool:
    """Whether a redis server answers PING through 127.0.0.1:port."""
    try:
        return exchange(port, _PING).startswith(b"+PONG")
    except OSError:
        return False


def stop(port: int) -> None:
    with contextlib.suppress(OSError):
        exchange(port, _SHUTDOWN)


DOMAIN_PORT = 16379  # not 6379, where a user's guest may run its own redis-server


def daemon_argv(argv: list[str], pidfile: str) -> list[str]:
    """redis-server as its own daemon in a user's domain: --daemonize yes, its pid in
    `pidfile`, its log beside it (pure)."""
    out = list(argv)
    for i, a in enumerate(out[:-1]):
        if a == "--daemonize":
            out[i + 1] = "yes"
    return [*out, "--pidfile", pidfile, "--logfile", pidfile.removesuffix(".pid") + ".log"]


def guest_argv(argv: list[str]) -> list[str]:
    """Redis 7 in protected mode answers only loopback clients, and forwarded connections come
    from slirp's 10.0.2.2: `--protected-mode no` in the guest, whose NIC is reachable from
    nothing but the host's 127.0.0.1 forward (restrict=on)."""
    out = list(argv)
    for i, a in enumerate(out[:-1]):
        if a == "--protected-mode":
            out[i + 1] = "no"
    return out


ASSUMED_RPS = 50_000         # requests a second per test, unpipelined, on loopback
ASSUMED_PRELOAD_PER_S = 300_000  # pipelined SETs a second


def load_seconds(table: dict[str, Any]) -> float:
    """About how long a trial's load takes, for the cost estimate: the preload, then every
    test's requests at ASSUMED_RPS (times the pipeline depth)."""
    d = RedisBenchmark.__dataclass_fields__
    get = lambda k: table.get(k, d[k].default)  # noqa: E731
    keys = get("keyspace") or 0
    preload = get("preload")
    fill = keys if (preload if preload is not None else not get("rdb")) else 0
    tests = len(get("tests") or ()) or 1
    return fill / ASSUMED_PRELOAD_PER_S + \
        int(get("requests")) * tests / (ASSUMED_RPS * max(1, int(get("pipeline"))))


KEYS = (  # the [workload] keys, for docs/kinds.md
    Key('requests', 'requests', 'redis-benchmark -n: requests of each test'),
    Key('clients', '', 'redis-benchmark -c: parallel connections'),
    Key('tests', '', 'redis-benchmark -t: the commands it sends ("set", "get", ...)'),
    Key('data_size', 'bytes', "redis-benchmark -d: each value's size (and the preload's)"),
    Key('pipeline', '', 'redis-benchmark -P: requests per round trip'),
    Key('keyspace', 'keys',
        'redis-benchmark -r: random keys from this many (none: one key, which no page size can matter for)'),
    Key('threads', '', 'redis-benchmark --threads (none: one)'),
    Key('port', '', "the server's port (none: a free one)"),
    Key('app', '',
        'Redis\'s own settings for the arm, e.g. { disable-thp = "yes" } (applications.md)'),
    Key('server_binary', '', 'the redis-server program'),
    Key('benchmark_binary', '', 'the redis-benchmark program'),
    Key('timeout_s', 's', "the longest a trial's load may take (none: hugelab's)"),
    Key('duration_s', 's', 'design "interleaved": seconds of load per arm and trial'),
    Key('window_s', 's', 'design "interleaved": each window\'s length'),
    Key('window_ops', 'requests', 'design "interleaved": windows of this many requests instead'),
    Key('warm_ops', 'requests', "per window and connection, untimed (the other arm's caches)"),
    Key('rdb', '', "a user's RDB file, loaded from a copy at each server's start"),
    Key('persistence', '', '"off", or "rdb" / "aof": BGSAVE / BGREWRITEAOF during the load'),
    Key('fork_every_s', 's', 'persistence: seconds of load before each save'),
    Key('preload', '',
        'every key of keyspace SET before the load (none: yes, unless rdb brings the data)'),
)


KIND = Kind(
    keys=KEYS,
    name="redis", workload=RedisBenchmark,
    summary="redis-server loaded by redis-benchmark, with Redis's own disable-thp per arm",
    role="server", where=frozenset({"host", "guest", "domain", "interleaved"}),
    tools=(Tool("redis-server", "redis-server"), Tool("redis-benchmark", "redis-tools"),
           Tool("redis-cli", "redis-tools")),
    server=ServerInGuest("redis-server", 6379, ready, stop, guest_argv),
    duration=("timeout_s", None), seconds=load_seconds, judge=judge, interleave=persist.interleave_problem,
    leftovers=rdb_leftovers, app={"disable-thp": ("yes", "no", True, False)})
