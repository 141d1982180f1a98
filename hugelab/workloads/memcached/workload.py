"""memcached as a cache, loaded by memcslap (libmemcached-tools) over 127.0.0.1, with its own
large-page switch per arm.

Server: `memcached -u nobody -l 127.0.0.1 -p P -U 0 -m MB -t T [-L]`. `-L` (app
`large_pages = true`) preallocates all of `-m` in one 2 MiB-aligned chunk and madvises it
(MADV_HUGEPAGE): THP, not hugetlb, so its arm's backing is `thp` with host THP `madvise` or
`always`. With -L memcached needs room for one page per slab class: hugelab refuses `-L` with
memory_mb below 48 before any trial (memcached itself would exit with "Error while
preallocating slab memory").
Client: `memcslap -s 127.0.0.1:P -t TEST -c C -e N` (loads N keys, then runs the test);
metric: requests/s of the test (C x N keys over memcslap's own "Time to <test>").
Defaults sized so that huge pages can matter: memcslap's values are random, up to ~5 KB, so its
default 50,000 keys preload ~130 MB of items (memcached's own `stats` bytes; ~160 MB in slabs),
and `-m 256` holds them without an eviction; design "interleaved" preloads 1,000,000 keys of
100 bytes (~175 MB of items, ~190 MB in slabs), like Redis.
Evidence: the server's own mappings, read just before it stops (memcached.evidence
.check_memcached: -L madvised its memory and it is in THP; no -L madvised nothing), beside the
tree's smaps.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from hugelab.errors import ExperimentError, WorkloadError
from hugelab.kernel import meminfo_kb
from hugelab.proc import which
from hugelab.units import amount
from hugelab.workloads.base import ExecResult, Target, WorkloadResult
from hugelab.workloads.guestside import in_domain
from hugelab.workloads.interleave import requests_only
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
from hugelab.workloads.memcached import guestcost
from hugelab.workloads.memcached.control import DOMAIN_PORT, daemon_argv, guest_argv, ready, stop
from hugelab.workloads.memcached.evidence import judge
from hugelab.workloads.preview import GuestBuild
from hugelab.workloads.process_thp import check_mode
from hugelab.workloads.reqmix import memcached_server
from hugelab.workloads.serverkind import Running, ServerKind, version
from hugelab.workloads.serverplace import InDomain
from hugelab.workloads.serverside import LOOPBACK, ServerSide
from hugelab.workloads.toolrun import check_exit, first_version, tail

MIN_LARGE_PAGES_MB = 48  # one 1 MiB page per slab class, preallocated by -L
APP_KEYS: dict[str, type] = {"large_pages": bool, "memory_mb": int, "threads": int}
Test = Literal["get", "set", "mget"]


@dataclass(frozen=True)
class MemcachedBenchmark(ServerKind):
    """memcached loaded with memcslap; primary metric `ops_per_s` of the test (higher)."""

    # memory_mb holds either default data set without an eviction; execute_number's get
    # preloads ~130 MB of items
    memory_mb: int = key(256, "memcached -m: its item memory (with app -L, preallocated in "
                              "large pages)", unit="MiB")
    threads: int = key(2, "memcached -t")
    test: Test = key("get", "memcslap --test")
    concurrency: int = key(4, "memcslap --concurrency")
    execute_number: int = key(50000, "memcslap --execute-number: keys loaded "
                                     "first (random values up to ~5 KB), then "
                                     "requests per connection", unit="requests")
    binary_protocol: bool = key(False, "memcslap --binary")
    port: int | None = key(None, SERVER_PORT)
    client_apart: bool = key(False, CLIENT_APART)
    server_binary: str = key("memcached", program("server_binary", "memcached"))
    client_binary: str = key("memcslap", program("client_binary", "memcslap"))
    timeout_s: float = key(300.0, timeout("a trial"))
    duration_s: float = key(10.0, interleaved("duration_s", "s", "seconds of requests per trial"))
    window_ops: int | None = key(None, interleaved("window_ops", "requests",
                                                   "windows of this many requests"))
    warm_ops: int = key(20, warm_ops("requests"))
    keyspace: int = key(1_000_000, interleaved("keyspace", "keys",
                                               "keys, every one written first"))
    value_size: int = key(100, interleaved("value_size", "bytes", "bytes per value"))
    app: tuple[tuple[str, Any], ...] = key((), "memcached's own switches for the arm, e.g. "
                                               "{ large_pages = true }")
    process_thp: str | None = None
    server: ServerSide | None = field(default=None, compare=False, repr=False)
    kind: str = field(default="memcached", init=False)

    tool: ClassVar[str] = "memcached"
    domain: ClassVar[InDomain] = InDomain(DOMAIN_PORT, daemon_argv, owner="nobody")

    def __post_init__(self) -> None:
        check_mode("memcached", self.process_thp)
        if self.window_ops is not None and (self.window_ops < 1 or self.warm_ops < 0 or
                                            self.test == "mget"):
            raise ExperimentError("memcached: window_ops is at least 1, warm_ops at least 0, "
                                  "and the test get or set")
        if self.keyspace < 1 or self.value_size < 1 or self.duration_s < 1:
            raise ExperimentError("memcached: keyspace, value_size and duration_s are at "
                                  "least 1")
        if self.test not in ("get", "set", "mget"):
            raise ExperimentError(f"memcached: test must be get, set or mget, not {self.test!r}")
        s = self.settings()
        for name, value in (("memory_mb", s["memory_mb"]), ("threads", s["threads"]),
                            ("concurrency", self.concurrency),
                            ("execute_number", self.execute_number)):
            if value < 1:
                raise ExperimentError(f"memcached: {name} must be at least 1")
        if s["large_pages"] and s["memory_mb"] < MIN_LARGE_PAGES_MB:
            raise ExperimentError(
                f"memcached: large_pages (-L) preallocates a page for every slab class and "
                f"needs memory_mb >= {MIN_LARGE_PAGES_MB}; this arm has {s['memory_mb']}",
                hint=f"set memory_mb = {MIN_LARGE_PAGES_MB} or more")

    def settings(self) -> dict[str, Any]:
        s: dict[str, Any] = {"large_pages": False, "memory_mb": self.memory_mb,
                             "threads": self.threads}
        s.update(dict(self.app))
        return s

    def preflight(self, backing: str) -> None:
        """memcached and memcslap installed; -L only on a thp arm (it madvises THP)."""
        which(self.server_binary)
        which(self.client_binary)
        self.admit(backing)

    def admit(self, backing: str) -> None:
        """-L only on a thp arm (it madvises THP); no backing memcached cannot have."""
        large = self.settings()["large_pages"]
        if large and backing != "thp":
            raise ExperimentError(f"memcached: large_pages (-L) gives THP (it madvises its "
                                  f"memory), so its arm's backing is 'thp', not {backing!r}")
        if backing not in ("4k", "thp"):
            raise ExperimentError(f"memcached: backing {backing!r} is not one memcached can "
                                  "have: 4k, or thp (with large_pages, or host THP always)")

    def settings_warnings(self, backing: str) -> list[str]:
        """The dry run's word on this host: with -L memcached allocates all of memory_mb at
        its start, which this host may not have (each interleaved server its own)."""
        s = self.settings()
        have_kb = meminfo_kb("MemTotal")
        if not s["large_pages"] or not have_kb or s["memory_mb"] * 1024 <= have_kb:
            return []
        return [f"memcached: memory_mb = {s['memory_mb']} with large_pages (-L), which "
                f"allocates all of it at start, but this host has {amount(have_kb)} of memory"]

    def server_argv(self, port: int, files: Path | None = None) -> list[str]:
        """memcached on loopback TCP only, as nobody (pure)."""
        s = self.settings()
        argv = [self.server_binary, "-u", "nobody", "-l", LOOPBACK, "-p", str(port), "-U", "0",
                "-m", str(s["memory_mb"]), "-t", str(s["threads"])]
        return argv + (["-L"] if s["large_pages"] else [])

    def client_argv(self, port: int) -> list[str]:
        argv = [self.client_binary, "-s", f"{LOOPBACK}:{port}", "-t", self.test,
                "-c", str(self.concurrency), "-e", str(self.execute_number)]
        return argv + (["--binary"] if self.binary_protocol else [])

    def parse(self, res: ExecResult) -> WorkloadResult:
        """Metrics of one finished memcslap run (pure); WorkloadError when it failed."""
        check_exit(res, "memcslap")
        text = res.stdout + "\n" + res.stderr
        m = re.search(rf"Time to {self.test}\s+(\d+) keys by\s+(\d+) threads:\s+([0-9.]+) "
                      "seconds", text)
        if m is None or float(m.group(3)) <= 0:
            raise WorkloadError(f"memcslap printed no 'Time to {self.test}' line\n  "
                                f"{tail(text, 5) or '(no output)'}")
        keys, secs = int(m.group(1)), float(m.group(3))
        metrics = {"ops_per_s": keys / secs, "test_s": secs, "keys": float(keys),
                   "wall_s": res.wall_s}
        if t := re.search(r"Time total:\s+([0-9.]+) seconds", text):
            metrics["total_s"] = float(t.group(1))
        info: dict[str, Any] = {"tool": "memcslap", "test": self.test,
                                "version": first_version(text, r"libmemcached v(\S+)\)"),
                                "warnings": []}
        return WorkloadResult(metrics=metrics, primary="ops_per_s", unit="requests/s",
                              better="higher", info=info)

    # -- one trial (hugelab.workloads.serverkind.ServerKind.run) ------------------------------
    def load(self, client: Target, port: int, files: Path | None) -> ExecResult:
        return client.exec(self.client_argv(port), timeout=self.timeout_s)

    def loaded(self, load: ExecResult, output: str, client: Target) -> WorkloadResult:
        result = self.parse(load)
        result.info["server_version"] = self.server_version(client if in_domain(client) else None)
        return result

    def describe(self, result: WorkloadResult, backing: str) -> None:
        """memcached's own switches, for the app evidence rule (judge)."""
        s = self.settings()
        result.evidence["memcached"] = s
        result.info["backing"] = backing
        result.info["memcached_settings"] = s

    # -- request-level interleaving (hugelab.workloads.requests) ----------------------------
    @property
    def clients(self) -> int:
        return self.concurrency

    def served(self, result: WorkloadResult, srv: Running) -> None:
        result.evidence["server_output_tail"] = ""  # kept: its trials have always had one
        result.info["server_version"] = self.server_version()

    def server_version(self, where: Target | None = None) -> str | None:
        """memcached's version, from `-V` (in a user's domain: the domain's memcached)."""
        return version([self.server_binary, "-V"], r"memcached (\S+)", where)

    def reqmix_server(self, host: str, port: int) -> str:
        return memcached_server(host, port)

    def request_load(self) -> dict[str, Any]:
        """`test` get or set on keyspace keys of value_size bytes, every key written first."""
        return {"keyspace": self.keyspace, "value_size": self.value_size,
                "set_ratio": 1.0 if self.test == "set" else 0.0, "preload": True}


ASSUMED_OPS_PER_S = 30_000  # memcslap's requests a second on loopback, for the cost estimate


def load_seconds(table: dict[str, Any]) -> float:
    """About how long a trial's load takes: memcslap's requests at ASSUMED_OPS_PER_S, and a
    second for the server's start and stop."""
    return int(MemcachedBenchmark.setting(table, "execute_number")) / ASSUMED_OPS_PER_S + 1.0


def guest_build(table: dict[str, Any]) -> GuestBuild:
    """The in-guest part of a trial of `table` in a user's domain (guestcost): memcslap's
    requests (the keys it sets first, then each connection's), less what load_seconds (the
    host's rate) counts."""
    def get(key: str) -> Any:
        return MemcachedBenchmark.setting(table, key)
    keys, conns = int(get("execute_number")), int(get("concurrency"))
    return guestcost.guest_build(keys * (conns + (0 if get("test") == "set" else 1)),
                                 load_seconds(table) - 1.0)


KIND = Kind(
    keys=keys_of(MemcachedBenchmark),
    name="memcached", workload=MemcachedBenchmark,
    summary="memcached loaded by memcslap, with memcached's own -L (large pages) per arm",
    role="server", where=frozenset({"host", "guest", "domain", "interleaved"}),
    tools=(Tool("memcached", "memcached"), Tool("memcslap", "libmemcached-tools")),
    interleave=requests_only("memcached", "memcslap"), seconds=load_seconds,
    guest_build=guest_build,
    server=ServerInGuest("memcached", 11211, ready, stop, guest_argv), judge=judge,
    app=APP_KEYS)
