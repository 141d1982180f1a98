"""Varnish Cache with its malloc storage, loaded by wrk over 127.0.0.1, with jemalloc's own THP
switch per arm.

Server: `varnishd -F -n DIR -a 127.0.0.1:P -f DIR/hugelab.vcl -s malloc,MB -T none -j none`,
kept by the base's keeper (hugelab.workloads.serverkeep, natively too; DIR its private
directory in the trial's scratch, hence no jail). The VCL has no backend: every miss is
answered by vcl_backend_error with a 200 of `object_kb` and a TTL of an hour, so the objects
live in the malloc storage, jemalloc's memory (Debian links varnishd against libjemalloc): app
`jemalloc_thp` sets `MALLOC_CONF=thp:always|never` (jemalloc madvises its extents
MADV_HUGEPAGE, or MADV_NOHUGEPAGE); `default` leaves jemalloc to the host's THP mode.
`always` gives THP, so its arm's backing is `thp`.
Client: wrk twice: a preload (one connection asks each of the `objects` paths once, so every
object is cached: MAIN.cache_miss), then `wrk -t T -c C -d D` on random paths among them (all
hits); metric: the timed run's requests/s (wrk's own `Requests/sec`). Design "interleaved"
with `window_ops`: every arm's varnishd up at once, hugelab-reqmix's GETs (its http protocol:
every path /key:N asked once first, then random ones) in windows across them.
Evidence (the keeper's hooks, `Kept`): the THP picture of varnishd's cache process (the
manager's child, cache-main) as evidence["server"], varnishd's own counters (`varnishstat -1`,
before the stop; interleaved: after the windows) as evidence["varnish_stats"]. In hugelab's
own guests the keeper stops varnishd once a GET of STOP_PATH, which the VCL passes, is counted
(MAIN.s_pass); readiness is a GET of READY_PATH (a synth 200).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from hugelab import proc
from hugelab.checks import Check
from hugelab.errors import ExperimentError, WorkloadError
from hugelab.workloads.base import ExecResult, Target, WorkloadResult
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
from hugelab.workloads.process_thp import check_mode
from hugelab.workloads.reqmix import http_server
from hugelab.workloads.serverjudge import check_madvised, judge_switch
from hugelab.workloads.serverkeep import InPlace, first_child, last_report
from hugelab.workloads.serverkind import Running, ServerKind, answers, tell, version
from hugelab.workloads.serverside import LOOPBACK, ServerSide
from hugelab.workloads.toolrun import first_version, tail
from hugelab.workloads.wrk import parse_wrk, preload_lua, random_lua, run_wrk

JEMALLOC_THP = ("default", "always", "never")
APP_KEYS: dict[str, type | tuple[Any, ...]] = {"jemalloc_thp": JEMALLOC_THP}
READY_PATH, STOP_PATH = "/hugelab-ready", "/hugelab-stop"
COUNTERS = ("MAIN.client_req", "MAIN.cache_hit", "MAIN.cache_miss", "MAIN.n_object",
            "MAIN.s_synth", "MAIN.s_pass", "SMA.s0.g_bytes", "SMA.s0.c_fail")


def get(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: hugelab\r\n\r\n".encode()


def ready(port: int) -> bool:
    """Whether a varnishd answers READY_PATH (its VCL's synth 200) through 127.0.0.1:port."""
    return answers(port, get(READY_PATH), b"HTTP/1.1 200")


def stop(port: int) -> None:
    """A GET of STOP_PATH, which the VCL passes: the supervisor sees MAIN.s_pass and stops."""
    tell(port, get(STOP_PATH))


def vcl(object_kb: int) -> str:
    """The VCL (pure): no backend, every miss a cached 200 of object_kb KiB."""
    body = "x" * (object_kb * 1024)
    return ("vcl 4.1;\nbackend default none;\nsub vcl_recv {\n"
            f'  if (req.url == "{READY_PATH}") {{ return (synth(200)); }}\n'
            f'  if (req.url == "{STOP_PATH}") {{ return (pass); }}\n}}\n'
            "sub vcl_backend_error {\n  set beresp.status = 200;\n  set beresp.ttl = 1h;\n"
            f'  synthetic({{"{body}"}});\n  return (deliver);\n}}\n')


@dataclass(frozen=True)
class VarnishBenchmark(ServerKind):
    """varnishd (malloc storage) loaded with wrk; primary metric `requests_per_s` (higher)."""

    storage_mb: int = key(512, "varnishd -s malloc,SIZE: its object storage (jemalloc's)",
                          unit="MiB")
    # 16384 x 16 KiB: 256 MiB of objects in the malloc storage
    objects: int = key(16384, "distinct paths, each cached once by the preload", unit="objects")
    object_kb: int = key(16, "bytes of each object (a synthetic 200 the VCL caches for an "
                             "hour)", unit="KiB")
    threads: int = key(2, "wrk --threads")
    connections: int = key(16, "wrk --connections of the timed run")
    duration_s: float = key(5.0, "wrk --duration of the timed run (design \"interleaved\": "
                                 "seconds of requests per trial)", unit="s")
    window_ops: int | None = key(None, interleaved("window_ops", "requests", "windows of this "
                                                   "many GETs from `threads` connections"))
    warm_ops: int = key(20, warm_ops("requests"))
    port: int | None = key(None, SERVER_PORT)
    client_apart: bool = key(False, CLIENT_APART)
    server_binary: str = key("varnishd", program("server_binary", "varnishd"))
    client_binary: str = key("wrk", program("client_binary", "wrk"))
    stat_binary: str = key("varnishstat", "the varnishstat program (varnishd's own counters)")
    timeout_s: float = key(300.0, timeout("a trial"))
    app: tuple[tuple[str, Any], ...] = key((), "jemalloc's THP switch for the arm, e.g. "
                                               '{ jemalloc_thp = "always" }')
    process_thp: str | None = None
    server: ServerSide | None = field(default=None, compare=False, repr=False)
    kind: str = field(default="varnish", init=False)

    tool: ClassVar[str] = "varnishd"

    def __post_init__(self) -> None:
        check_mode("varnish", self.process_thp)
        for name in ("storage_mb", "objects", "object_kb", "threads", "connections"):
            if getattr(self, name) < 1:
                raise ExperimentError(f"varnish: {name} must be at least 1")
        if self.duration_s <= 0 or self.connections < self.threads:
            raise ExperimentError("varnish: duration_s above 0, connections >= threads")
        if self.objects * self.object_kb > self.storage_mb * 1024:
            raise ExperimentError(
                f"varnish: {self.objects} objects of {self.object_kb} KiB do not fit in "
                f"storage_mb {self.storage_mb} (varnish would evict)",
                hint="raise storage_mb or lower objects")

    def jemalloc_thp(self) -> str:
        return str(dict(self.app).get("jemalloc_thp", "default"))

    def preflight(self, backing: str) -> None:
        for tool in (self.server_binary, self.client_binary, self.stat_binary):
            proc.which(tool)
        self.admit(backing)

    def admit(self, backing: str) -> None:
        """jemalloc thp:always only on a thp arm; no backing varnishd cannot have."""
        super().admit(backing)
        if self.jemalloc_thp() == "always" and backing != "thp":
            raise ExperimentError(f"varnish: jemalloc_thp 'always' madvises its storage for "
                                  f"THP, so its arm's backing is 'thp', not {backing!r}")

    def server_argv(self, port: int, files: Path | None = None) -> list[str]:
        """varnishd -F (pure); its keeper adds its work directory, address and VCL."""
        return [self.server_binary, "-F", "-s", f"malloc,{self.storage_mb}m", "-T", "none",
                "-j", "none"]

    def in_place(self, port: int) -> Kept:
        return Kept(self.stat_binary, LOOPBACK, str(port), str(self.object_kb),
                    self.jemalloc_thp())

    # -- one trial (hugelab.workloads.serverkind.ServerKind.run) ------------------------------
    def own_files(self, target: Target | None) -> Path | None:
        files = Path(tempfile.mkdtemp(prefix="hugelab-wrk-"))
        (files / "preload.lua").write_text(preload_lua(self.objects))
        (files / "random.lua").write_text(random_lua(self.objects))
        return files

    def drop_files(self, files: Path | None) -> None:
        if files is not None:
            shutil.rmtree(files, ignore_errors=True)

    def load(self, client: Target, port: int, files: Path | None) -> tuple[ExecResult, ...]:
        assert files is not None
        def wrk(script: str, conns: tuple[int, int], secs: float) -> ExecResult:
            return run_wrk(client, self.client_binary, self.timeout_s,
                           f"http://{LOOPBACK}:{port}/", files / script, conns, secs)
        return (wrk("preload.lua", (1, 1), self.timeout_s / 2),
                wrk("random.lua", (self.threads, self.connections), self.duration_s))

    def loaded(self, load: tuple[ExecResult, ...], output: str, client: Target
               ) -> WorkloadResult:
        timed = parse_wrk(load[1].stdout + "\n" + load[1].stderr)
        stats = self.own_report(output)
        if not stats:
            raise WorkloadError(f"varnish: its keeper printed no counters\n  "
                                f"{tail(output, 8) or '(no output)'}")
        metrics = {**timed, "wall_s": load[1].wall_s, "preload_s": load[0].wall_s,
                   "storage_mb_used": stats.get("SMA.s0.g_bytes", 0) / 2**20}
        info: dict[str, Any] = {"tool": "wrk", "server_version": first_version(
            output, r"Version: varnish-(\S+)"), "version": version(
            [self.client_binary, "-v"], r"wrk (\S+)"), "warnings": []}
        result = WorkloadResult(metrics=metrics, primary="requests_per_s", unit="requests/s",
                                better="higher", info=info)
        result.evidence["varnish_stats"] = stats
        result.evidence["app_costs"] = {"storage_kb": stats.get("SMA.s0.g_bytes", 0) / 1024}
        return result

    # -- request-level interleaving (hugelab.workloads.requests) ----------------------------
    @property
    def clients(self) -> int:
        return self.threads

    def reqmix_server(self, host: str, port: int) -> str:
        return http_server(host, port)

    def request_load(self) -> dict[str, Any]:
        """GETs of `objects` paths, each asked once first (a miss, then cached)."""
        return {"keyspace": self.objects, "preload": True}

    def served(self, result: WorkloadResult, srv: Running) -> None:
        """varnishd's own counters, read while it runs (its work directory: the manager's -n)."""
        stats = last_report(self.in_place(srv.port), workdir_of(self.kept_server(srv)))
        if not stats:
            raise WorkloadError("varnish: varnishstat read no counters of this arm's varnishd")
        result.evidence["varnish_stats"] = stats
        result.evidence["app_costs"] = {"storage_kb": stats.get("SMA.s0.g_bytes", 0) / 1024}
        result.info["server_version"] = first_version(proc.run(
            [self.server_binary, "-V"], check=False, timeout=10).stderr, r"varnish-(\S+)")

    def describe(self, result: WorkloadResult, backing: str) -> None:
        """jemalloc's switch, judged against the cache process's own memory."""
        s = {"jemalloc_thp": self.jemalloc_thp(), "storage_mb": self.storage_mb}
        result.evidence["varnish"] = s
        result.info["backing"] = backing
        result.info["varnish_settings"] = s


def workdir_of(manager: int | None) -> str:
    """The work directory (-n) of the varnishd manager `manager`, from its command line."""
    try:
        args = Path(f"/proc/{manager}/cmdline").read_bytes().split(b"\0")
        return args[args.index(b"-n") + 1].decode()
    except (OSError, ValueError, IndexError) as exc:
        raise WorkloadError(f"varnish: no varnishd manager with a work directory (pid "
                            f"{manager}): {exc}") from exc


def check_varnish(jemalloc_thp: str, server: dict[str, Any]) -> Check:
    """jemalloc's switch from the cache process's mappings: thp:always madvised its storage
    and it is in THP; default and never madvised nothing."""
    return check_madvised(f"varnishd with jemalloc thp:{jemalloc_thp}", jemalloc_thp == "always",
                          server)


def judge(evidence: Mapping[str, Any]) -> Check | None:
    """jemalloc's switch (evidence["varnish"]) against the cache process's own mappings."""
    return judge_switch(evidence, "varnish", "varnishd's cache process was not read (it ended "
                        "first)", lambda v, server: check_varnish(
                            str(v.get("jemalloc_thp", "default")), server))


# -- where varnishd runs (hugelab.workloads.serverkeep's keeper), natively and in a guest ----
@dataclass(frozen=True)
class Kept(InPlace):
    """varnishd kept: its VCL in its work directory, jemalloc's switch in its environment,
    its cache process's memory, its counters, and a GET of STOP_PATH as the stop."""

    stat: str
    addr: str
    port: str
    object_kb: str
    thp: str
    workdir: ClassVar[bool] = True

    def command(self, argv: list[str], workdir: str | None) -> tuple[list[str], dict[str, str]]:
        Path(f"{workdir}/hugelab.vcl").write_text(vcl(int(self.object_kb)))
        env = {"MALLOC_CONF": f"thp:{self.thp}"} if self.thp != "default" else {}
        return [*argv, "-n", str(workdir), "-a", f"{self.addr}:{self.port}", "-f",
                f"{workdir}/hugelab.vcl"], env

    def own_pid(self, pid: int) -> int | None:
        return first_child(pid, comm="cache-main")

    def report(self, workdir: str | None) -> dict[str, Any]:
        res = proc.run([self.stat, "-n", str(workdir), "-t", "2", "-1",
                        *(a for c in COUNTERS for a in ("-f", c))], check=False, timeout=10)
        return {p[0]: int(p[1]) for p in map(str.split, res.stdout.splitlines())
                if len(p) > 1 and p[0] in COUNTERS and p[1].isdigit()}

    def stop_asked(self, report: dict[str, Any]) -> bool:
        return bool(report.get("MAIN.s_pass"))

    def settled(self, report: dict[str, Any]) -> bool:
        """Every request varnishd counted is counted as what it was (a worker sums its own
        counters into the shared ones now and then: a reading can hold a request's client_req
        and not yet its hit)."""
        return report.get("MAIN.client_req", 0) == sum(report.get(f"MAIN.{c}", 0) for c in (
            "cache_hit", "cache_miss", "s_synth", "s_pass"))


def load_seconds(table: dict[str, Any]) -> float:
    """The timed run, and about two seconds for the preload, the start and the stop."""
    return float(VarnishBenchmark.setting(table, "duration_s")) + 2.0


KIND = Kind(
    keys=keys_of(VarnishBenchmark), name="varnish", workload=VarnishBenchmark,
    summary="Varnish Cache (malloc storage) loaded by wrk, with jemalloc's THP switch per arm",
    role="server", where=frozenset({"host", "guest", "interleaved"}),
    interleave=requests_only("varnish", "wrk"),
    tools=(Tool("varnishd", "varnish"), Tool("varnishstat", "varnish"), Tool("wrk", "wrk")),
    duration=("duration_s", 5.0), seconds=load_seconds,
    server=ServerInGuest("varnishd", 6081, ready, stop), judge=judge, app=APP_KEYS)

