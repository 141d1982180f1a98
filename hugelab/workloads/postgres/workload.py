"""`kind = "postgres"`: a PostgreSQL server per trial with the arm's settings, loaded by pgbench.

    [workload]
    kind = "postgres"
    builtin = "select-only"     # or tpcb-like, simple-update; or script = "/path/to/file.sql"
    scale = 10                  # pgbench -i -s: the template cluster's size (cached)
    clients = 4
    threads = 2
    duration_s = 10             # pgbench -T (or transactions = N per client: -t)
    prewarm = true              # shared buffers filled by pg_prewarm before the load (prewarm.py)

    [[arms]]
    name = "on"
    backing = "hugetlb-2M"      # huge_pages = "on", huge_page_size = "2MB" unless app says else
    app = { shared_buffers = "256MB" }

An arm's `app` keys are postgresql.conf settings passed as server options; the server itself
judges them (`postgres -C`) before any trial. `huge_pages` defaults to `on` for a hugetlb
backing and `off` for 4k, never PostgreSQL's own default `try` (which falls back silently: an
arm that asks for `try` gets its fallback flagged by the evidence). The pool an arm needs comes
from the server (`postgres -C shared_memory_size_in_huge_pages`). Metrics: tps (primary) and
per-transaction latency percentiles from pgbench's log; evidence: the postmaster's segment in
smaps (segment.py). In hugelab's own guests the same trial runs inside the guest (inguest.py)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hugelab.errors import ExperimentError, WorkloadError
from hugelab.units import parse_size
from hugelab.workloads.base import Place, Target, WorkloadResult, place_of
from hugelab.workloads.guestside import in_domain
from hugelab.workloads.interleave import server_problem
from hugelab.workloads.kind import Key, Kind, interleaved, timeout, warm_ops
from hugelab.workloads.postgres import (
    cluster,
    guestcost,
    guestio,
    indomain,
    leftovers,
    pgbench,
    prewarm,
    rules,
    segment,
    server,
    template,
    userdata,
)
from hugelab.workloads.preview import Build
from hugelab.workloads.reqmix import pg_server
from hugelab.workloads.requests import start_one
from hugelab.workloads.toolrun import check_exit


@dataclass(frozen=True)
class Postgres:
    """PostgreSQL + pgbench; metrics tps, latency_avg_ms, p50_ms .. p99_9_ms."""

    builtin: str = "select-only"
    script: str | None = None
    scale: int = 10
    clients: int = 4
    threads: int = 2
    duration_s: float = 10.0
    transactions: int | None = None
    warmup_s: float = 2.0
    window_s: float = 2.0  # design "interleaved": each arm's pgbench window
    window_ops: int | None = None  # design "interleaved": windows of this many transactions
    warm_ops: int = 5      # per window and connection, untimed (the other arm's caches)
    prewarm: bool = True   # pg_prewarm fills shared buffers before the load (prewarm.py)
    bindir: str | None = None
    timeout_s: float | None = None
    app: tuple[tuple[str, Any], ...] = ()
    dump: str | None = None      # a user's pg_dump file: restored once, cached, then copied
    datadir: str | None = None   # a user's data directory: copied per trial, never opened
    conf: str | None = None      # a user's postgresql.conf: its settings under the arm's
    arm_backing: str | None = None  # set by for_arm: the arm's backing decides the defaults
    domain_arm: bool = False  # set by for_arm: a user's domain runs its own PostgreSQL
    kind: str = field(default="postgres", init=False)
    conf_items: tuple[tuple[str, str], ...] = field(default=(), init=False, compare=False,
                                                     repr=False)

    def __post_init__(self) -> None:
        rules.validate(self)

    # -- the arm's settings -----------------------------------------------------------------
    def preflight(self, backing: str) -> None:
        rules.check_open_files(self.clients)

    def for_arm(self, arm: Any) -> Postgres:
        """This workload as `arm` runs it: its backing decides huge_pages/huge_page_size
        defaults; the server checks every setting (`postgres -C`) now, before any trial."""
        vm = getattr(arm, "vm", None)
        domain = vm is not None and vm.domain is not None
        try:
            own = dataclasses.replace(self, arm_backing=arm.backing, domain_arm=domain)
            if domain:  # the guest's server judges the settings, in the trial; its user
                return own  # data was checked by replace (userdata.check_user_data)
        except ExperimentError as exc:
            raise ExperimentError(f"arm '{arm.name}': {exc.message}", hint=exc.hint) from None
        if template.unbuilt(own, own._bin()):
            return own  # a dry run builds no template: the run checks the settings
        try:
            own.ask("huge_pages")
        except WorkloadError as exc:
            raise ExperimentError(f"arm '{arm.name}': postgres refused its settings: "
                                  f"{exc.message}") from None
        return own

    def settings(self, backing: str | None = None) -> dict[str, object]:
        """The server settings of this arm (rules.server_settings)."""
        return rules.server_settings(self, backing or self.arm_backing or "4k")

    def settings_warnings(self, backing: str | None = None) -> list[str]:
        """What the user's files set that the arm overrides (also for `run --dry-run`)."""
        return userdata.warnings(self, self.settings(backing))

    # -- the server's own answers -----------------------------------------------------------
    def _bin(self) -> Path:
        return cluster.bindir(self.bindir)

    def template(self) -> Path:
        return template.source(self, self._bin())

    def builds(self) -> list[Build]:  # what a run builds first (the dry run builds none)
        return [] if self.domain_arm else template.planned(self, self._bin())

    def ask(self, name: str) -> str:
        """`postgres -C name` with this arm's settings, on a copy of the template."""
        return template.ask(self, self._bin(), name)

    def hugetlb_bytes_for(self, size: str | None) -> int:
        """Bytes of huge pages the server maps: PostgreSQL's own count (0: huge_pages off)."""
        settings = self.settings()
        if settings["huge_pages"] == "off" or not rules.BACKINGS.get(self.arm_backing or "4k") \
                or self.domain_arm:  # a domain's pool is grown in the trial, from its server
            return 0
        page = parse_size(str(settings.get("huge_page_size", "2MB")))  # "2MB", "1GB"
        if template.unbuilt(self, self._bin()):  # a dry run: no server to ask yet
            return -(-server.shared_estimate(settings) // page) * page
        return max(int(self.ask("shared_memory_size_in_huge_pages")), 0) * page

    # -- one trial --------------------------------------------------------------------------
    def exec_timeout(self, seconds: float) -> float:
        return self.timeout_s if self.timeout_s is not None else 120.0 + 3 * seconds

    def start(self, backing: str) -> server.Server:
        """launched, then fill; the caller stops it (stop_and_remove)."""
        return start_one(self, backing)

    def launched(self, backing: str) -> server.Server:
        """The server up on its private cluster copy, not yet prewarmed: request-level trials
        launch every arm's, then prewarm them all at once (requests.start_all)."""
        rules.check_backing(self, backing)
        bin_dir, tpl = self._bin(), self.template()
        cd = cluster.new_dir("trial")
        try:
            userdata.copy(self, tpl, cd)
            settings = self.settings(backing)
            return server.start(bin_dir, cd, settings, huge=settings["huge_pages"] != "off")
        except BaseException:
            cluster.remove_dir(cd)
            raise

    def fill(self, srv: server.Server) -> None:
        """Its shared buffers filled by pg_prewarm (`prewarm = true`)."""
        if self.prewarm:
            srv.prewarmed_blocks = prewarm.fill(self._bin() / "psql", srv.cd.top, server.PORT,
                                                cluster.USER, self.exec_timeout(60.0))

    def window(self, target: Target, srv: server.Server, seconds: float | None,
               log: bool = True) -> tuple[dict[str, float], np.ndarray]:
        """One pgbench run against `srv` (`seconds`, or None: `transactions` per client): its
        summary and, with `log`, every transaction's latency in µs."""
        prefix = srv.cd.top / "pgbench"
        for f in pgbench.log_files(prefix):
            f.unlink()
        argv = pgbench.argv(self._bin() / "pgbench", srv.cd.top, server.PORT,
                            builtin=self.builtin, script=self.script, clients=self.clients,
                            threads=self.threads, seconds=seconds,
                            transactions=self.transactions if seconds is None else None,
                            log_prefix=prefix if log else None)
        res = target.exec(argv,
                          timeout=self.exec_timeout(seconds or self.duration_s))
        check_exit(res, "pgbench")
        lat = pgbench.log_latencies_us(pgbench.log_files(prefix)) if log else np.empty(0)
        return pgbench.summary(res.stdout), lat

    def warm(self, target: Target, srv: server.Server) -> None:
        if self.warmup_s >= 1:
            self.window(target, srv, self.warmup_s, log=False)

    def finish(self, srv: server.Server, windows: list[dict[str, float]],
               latencies: np.ndarray, backing: str) -> WorkloadResult:
        """The trial's result from its windows (one, in a paired trial) and the segment's
        evidence, read now, with the server still up; WorkloadError without a segment."""
        evidence = segment.read_required(srv.pid)
        metrics = pgbench.window_metrics(windows, latencies)
        info = _info(self, srv, backing, "pgbench")
        if len(windows) > 1:
            metrics["duration_s"] = self.window_s * len(windows)
            tps = [w["tps"] for w in windows]
            info["reps"] = {"n": len(tps), "values": tps, "unit": "window",
                            "wall_s": [self.window_s] * len(tps)}
        return WorkloadResult(metrics=metrics, primary="tps", unit="transactions/s",
                              better="higher", evidence=evidence, info=info)

    # -- request-level interleaving (hugelab.workloads.requests) ----------------------------
    def request_server(self, srv: server.Server) -> str:
        return pg_server({"host": str(srv.cd.top), "port": server.PORT, "user": "postgres",
                          "dbname": "postgres"})

    def request_load(self) -> dict[str, Any]:
        """pgbench's script (built-in or the user's file), each op one run of it."""
        if self.script is not None:
            return {"pg_file": Path(self.script), "pg_scale": self.scale}
        return {"pg_builtin": self.builtin, "pg_scale": self.scale}

    def request_result(self, srv: server.Server, metrics: dict[str, float], backing: str
                       ) -> WorkloadResult:
        """The arm's result: `metrics`, and its own segment's evidence, read now."""
        return WorkloadResult(metrics=metrics, primary="ops_per_s", unit="transactions/s",
                              better="higher", evidence=segment.read_required(srv.pid),
                              info=_info(self, srv, backing, "hugelab-reqmix"))

    def server_pid(self, srv: server.Server) -> int:
        return srv.pid

    def stop(self, srv: server.Server) -> None:
        try:
            srv.stop()
        finally:
            cluster.remove_dir(srv.cd)

    def run(self, target: Target, backing: str) -> WorkloadResult:
        if in_domain(target):
            rules.check_backing(self, backing)
            return indomain.DomainTrial(self, target, backing).run()  # type: ignore[arg-type]
        if place_of(target) is Place.GUEST:
            rules.check_backing(self, backing)
            self.template()  # built here: the guest sees this host's root
            return guestio.run_in_own_guest(self, target, backing)
        srv = self.start(backing)
        try:
            self.warm(target, srv)
            seconds = None if self.transactions is not None else self.duration_s
            summary, lat = self.window(target, srv, seconds)
            return self.finish(srv, [summary], lat, backing)
        finally:
            self.stop(srv)


def _info(w: Postgres, srv: server.Server, backing: str, tool: str) -> dict[str, Any]:
    """A trial's info: its tool, the server's version, settings and output, the user's data."""
    return {"tool": tool, "version": cluster.version(w._bin()), "backing": backing,
            "settings": w.settings(backing), "builtin": w.script or w.builtin,
            "server_output_tail": srv.output(20),
            "warnings": w.settings_warnings(backing), **userdata.info(w),
            **({"prewarmed_blocks": srv.prewarmed_blocks} if w.prewarm else {})}


KEYS = (  # the [workload] keys, for docs/kinds.md
    Key('builtin', '',
        'pgbench\'s built-in script: "select-only", "tpcb-like" or "simple-update"'),
    Key('script', '',
        'your own pgbench script instead (run -M prepared, without -s: :scale is 1)'),
    Key('scale', '', "pgbench -i -s: the template's size (about 16 MB a step)"),
    Key('clients', '', 'pgbench -c: connections'),
    Key('threads', '', 'pgbench -j: threads'),
    Key('duration_s', 's', 'pgbench -T: how long the load runs'),
    Key('transactions', '', 'pgbench -t per client instead of duration_s'),
    Key('warmup_s', 's', 'untimed load before the measured one'),
    interleaved('window_s', 's', "each arm's pgbench window"),
    interleaved('window_ops', 'transactions', 'windows of this many instead'),
    warm_ops('transactions'),
    Key('prewarm', '', 'pg_prewarm fills shared buffers before the load'),
    Key('bindir', '', "the directory of postgres, initdb and pgbench (none: Debian's newest)"),
    timeout("a trial", "120 s + 3 x the load"),
    Key('app', '',
        'server settings for the arm, e.g. { shared_buffers = "1GB" }; huge_pages follows the backing'),
    Key('dump', '', 'your pg_dump file (plain, -Fc or -Ft): restored once into a cached template'),
    Key('datadir', '', "your stopped cluster's data directory: copied per trial, never opened"),
    Key('conf', '', "your postgresql.conf: its settings, under the arm's"),
)


KIND = Kind(
    keys=KEYS,
    name="postgres", workload=Postgres,
    summary="PostgreSQL loaded by pgbench, with huge_pages / huge_page_size per arm",
    role="server", where=frozenset({"host", "guest", "domain", "interleaved"}),
    test_packages=("postgresql",), duration=("duration_s", 10.0), interleave=server_problem,
    leftovers=leftovers.remove_leftovers, guest_build=guestcost.guest_build)
