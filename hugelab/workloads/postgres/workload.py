"""`kind = "postgres"`: a PostgreSQL server per trial with the arm's settings, loaded by pgbench.

    [workload]
    kind = "postgres"
    builtin = "select-only"     # or tpcb-like, simple-update; or script = "/path/to/file.sql"
    scale = 10                  # pgbench -i -s: the template cluster's size (cached)
    clients = 4
    threads = 2
    duration_s = 10             # pgbench -T (or transactions = N per client: -t)
    prewarm = true              # shared buffers filled by pg_prewarm before the load (prewarm.py)
    fresh_copy = false          # select-only keeps a stopped server's cluster for the next one

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
smaps (segment.py). In hugelab's own guests the same trial runs inside the guest (inguest.py);
in a user's domain the base runs it with the guest's own PostgreSQL (indomain.py)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from hugelab.errors import WorkloadError
from hugelab.workloads.base import Place, Target, WorkloadResult, place_of
from hugelab.workloads.guestside import DomainHandle, GuestSide, LayerBuild, in_domain
from hugelab.workloads.interleave import server_problem
from hugelab.workloads.kind import (
    CLIENT_APART,
    Kind,
    interleaved,
    key,
    keys_of,
    timeout,
    warm_ops,
)
from hugelab.workloads.postgres import (
    cluster,
    fillcost,
    guestcost,
    guestio,
    indomain,
    leftovers,
    pgbench,
    prewarm,
    rules,
    segment,
    server,
    sysvshm,
    template,
    trialinfo,
    userdata,
)
from hugelab.workloads.preview import Build
from hugelab.workloads.reqmix import pg_server
from hugelab.workloads.serverkind import Running, ServerKind
from hugelab.workloads.serverplace import InDomain
from hugelab.workloads.serverside import LocalServer, ServerHandle

# its own server in a user's domain, over a cluster the guest makes first (indomain)
DOMAIN = InDomain(indomain.PORT, indomain.daemon_argv, owner=indomain.USER, log=indomain.LOG,
                  ready_s=indomain.START_TIMEOUT_S)


@dataclass(frozen=True)
class Postgres(ServerKind):
    """PostgreSQL + pgbench; metrics tps, latency_avg_ms, p50_ms .. p99_9_ms."""

    builtin: str = key("select-only", 'pgbench\'s built-in script: "select-only", "tpcb-like" '
                       'or "simple-update"')
    script: str | None = key(None, "your own pgbench script instead (run -M prepared, without "
                             "-s: :scale is 1)")
    scale: int = key(10, "pgbench -i -s: the template's size (about 16 MB a step)")
    clients: int = key(4, "pgbench -c: connections")
    threads: int = key(2, "pgbench -j: threads")
    duration_s: float = key(10.0, "pgbench -T: how long the load runs", unit="s")
    transactions: int | None = key(None, "pgbench -t per client instead of duration_s")
    warmup_s: float = key(2.0, "untimed load before the measured one", unit="s")
    client_apart: bool = key(False, CLIENT_APART)
    window_s: float = key(2.0, interleaved("window_s", "s", "each arm's pgbench window"))
    window_ops: int | None = key(None, interleaved("window_ops", "transactions",
                                                   "windows of this many instead"))
    warm_ops: int = key(5, warm_ops("transactions"))
    prewarm: bool = key(True, "pg_prewarm fills shared buffers before the load")  # prewarm.py
    fresh_copy: bool = key(False, "a fresh copy of the cluster for every server even where "
                           "the load only reads it (select-only keeps a stopped server's "
                           "copy for the run's next)")
    bindir: str | None = key(None, "the directory of postgres, initdb and pgbench (none: "
                             "Debian's newest)")
    timeout_s: float | None = key(None, timeout("a trial", "120 s + 3 x the load"))
    app: tuple[tuple[str, Any], ...] = key((), 'server settings for the arm, e.g. { '
                                           'shared_buffers = "1GB" }; huge_pages follows the '
                                           'backing')
    dump: str | None = key(None, "your pg_dump file (plain, -Fc or -Ft): restored once into a "
                           "cached template")
    datadir: str | None = key(None, "your stopped cluster's data directory: copied per trial, "
                              "never opened")
    conf: str | None = key(None, "your postgresql.conf: its settings, under the arm's")
    arm_backing: str | None = None  # set by for_arm: the arm's backing decides the defaults
    domain_arm: bool = False  # set by for_arm: a user's domain runs its own PostgreSQL
    kind: str = field(default="postgres", init=False)
    conf_items: tuple[tuple[str, str], ...] = field(default=(), init=False, compare=False,
                                                     repr=False)

    # the base's (hugelab.workloads.serverkind): its port its LocalServer's or InDomain's, no
    # process_thp; its segment is its evidence, its output tail (or the guest's word) its info
    port = None
    process_thp = None
    server = None
    tool: ClassVar[str] = "postgres"
    domain: ClassVar[InDomain] = DOMAIN
    unit: ClassVar[str] = "transactions/s"
    output_evidence: ClassVar[bool] = False
    memory_evidence: ClassVar[bool] = False

    def __post_init__(self) -> None:
        rules.validate(self)

    # -- the arm's settings -----------------------------------------------------------------
    def preflight(self, backing: str) -> None:
        rules.check_open_files(self.clients)

    def for_arm(self, arm: Any) -> Postgres:
        """This workload as `arm` runs it, its settings judged by the server (template)."""
        return template.for_arm(self, arm)  # type: ignore[no-any-return]

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
        return rules.hugetlb_bytes(self, lambda: template.unbuilt(self, self._bin()))

    # -- its server, over the base (hugelab.workloads.serverkind.ServerKind) ----------------
    def exec_timeout(self, seconds: float) -> float:
        return self.timeout_s if self.timeout_s is not None else 120.0 + 3 * seconds

    def run(self, target: Target, backing: str) -> WorkloadResult:
        if backing != (self.arm_backing or "4k"):  # its server's settings follow the backing
            return dataclasses.replace(self, arm_backing=backing).run(target, backing)
        return super().run(target, backing)

    def launched(self, backing: str) -> Running:
        if backing != (self.arm_backing or "4k"):
            return dataclasses.replace(self, arm_backing=backing).launched(backing)
        return super().launched(backing)

    def admit(self, backing: str) -> None:
        rules.check_backing(self, backing)

    def whole_trial(self, target: Target, backing: str) -> WorkloadResult | None:
        """Hugelab's own guest runs the whole trial inside (guestio, inguest) on the template
        built here (it sees this host's root); None elsewhere: the base's."""
        if place_of(target) is Place.GUEST:
            self.template()
            return guestio.run_in_own_guest(self, target, backing)
        return None

    def own_files(self, target: Target | None) -> Path | None:
        """The template (or the user's data) copied; None in a user's domain (the guest's)."""
        return None if in_domain(target) else userdata.trial_dir(self, self.template())

    def prepare_domain(self, side: GuestSide, top: str) -> None:
        indomain.prepare(self, side)

    def guest_build(self) -> LayerBuild | None:
        """Its cluster in a user's domain, made and filled once (indomain.guest_build)."""
        return indomain.guest_build(self)

    def reuse_key(self) -> str | None:
        """Its cluster kept for the run's next server where its load only reads it (pgbench's
        select-only): what differs between fresh servers is where their memory lands, and a
        copy costs 0.6-1.0 s a scale-5 server, 2-9 s a scale-100 one. None: a fresh copy per
        trial (a script that writes, or the user's own script)."""
        if rules.keeps_cluster(self.builtin, self.script, self.fresh_copy) and \
                not self.domain_arm:
            return f"postgres:{self.bindir}:{self.datadir}:{self.dump}:{self.scale}"
        return None

    def files_whole(self, files: Path) -> bool:
        """Its postmaster stopped cleanly: no postmaster.pid left behind."""
        return not (cluster.ClusterDir(files).data / "postmaster.pid").exists()

    def drop_files(self, files: Path | None) -> None:
        if files is not None:
            sysvshm.drop_for(files / "data")  # left behind only by a postmaster that was killed
            cluster.remove_dir(cluster.ClusterDir(files))

    def local(self, port: int | None) -> LocalServer:
        return server.local()  # its private socket, on the one port it has there

    def server_argv(self, port: int, files: Path | None = None) -> list[str]:
        """The server over the cluster in `files`; none: a user's domain's (indomain)."""
        if files is None:
            return indomain.server_argv(self.settings(), port)
        return server.argv(self._bin(), cluster.ClusterDir(files), self.settings())

    def start_failed(self, exc: WorkloadError, files: Path | None) -> WorkloadError:
        return server.start_failed(exc, huge=self.settings()["huge_pages"] != "off")

    def filled(self, port: int, files: Path | None, client: Target | None = None) -> int:
        """Its shared buffers filled by pg_prewarm (`prewarm = true`): the blocks read."""
        if not self.prewarm or files is None:
            return 0
        return prewarm.fill(self._bin() / "psql", files, server.PORT, cluster.USER,
                            self.exec_timeout(60.0))

    def load(self, client: Target, port: int, files: Path | None) -> Any:
        """Prewarmed, warmed, then pgbench's measured run (`duration_s`, or `transactions`)."""
        if in_domain(client):
            return indomain.load(self, client)  # type: ignore[arg-type]
        assert files is not None
        return self.filled(port, files, client), *pgbench.measured(self, client, files)

    def last_look(self, load: Any, handle: ServerHandle, files: Path | None) -> Any:
        """The postmaster's segment (its evidence) and its output, read while it runs."""
        if isinstance(handle, DomainHandle):
            return load, *indomain.look(handle)
        pid = int(handle.proc.pid)  # type: ignore[attr-defined]
        return load, segment.read_required(pid), {"server_output_tail": trialinfo.tail(handle)}

    def loaded(self, load: Any, output: str, client: Target) -> WorkloadResult:
        (blocks, summary, lat), evidence, told = load
        return WorkloadResult(metrics=pgbench.window_metrics([summary], lat), primary="tps",
                              unit=self.unit, better="higher", evidence=evidence,
                              info={"tool": "pgbench", **told, "prewarmed_blocks": blocks})

    def describe(self, result: WorkloadResult, backing: str) -> None:
        domain = result.info.get("where") == "domain"
        result.info = (indomain.info if domain else trialinfo.info)(self, backing, result.info)

    # -- interleaved: windows of pgbench runs (interleave) or of requests (requests) --------
    def window(self, target: Target, srv: Running, seconds: float | None,
               log: bool = True) -> tuple[dict[str, float], np.ndarray]:
        assert srv.files is not None
        return pgbench.run_once(self, target, srv.files, seconds, log)

    def warm(self, target: Target, srv: Running) -> None:
        if self.warmup_s >= 1:
            self.window(target, srv, self.warmup_s, log=False)

    def finish(self, srv: Running, windows: list[dict[str, float]],
               latencies: np.ndarray, backing: str) -> WorkloadResult:
        """The trial's result from its windows (one, in a paired trial) and the segment's
        evidence, read now, with the server still up; WorkloadError without a segment."""
        result = WorkloadResult(metrics=pgbench.window_metrics(windows, latencies),
                                primary="tps", unit=self.unit, better="higher")
        looked(result, srv, self.server_pid(srv), "pgbench")
        self.describe(result, backing)
        trialinfo.windows(result, windows, self.window_s)
        return result

    def served(self, result: WorkloadResult, srv: Running) -> None:
        looked(result, srv, self.server_pid(srv), "hugelab-reqmix")

    def request_server(self, srv: Running) -> str:
        return pg_server({"host": str(srv.files), "port": server.PORT, "user": "postgres",
                          "dbname": "postgres"})

    def request_load(self) -> dict[str, Any]:
        """pgbench's script (built-in or the user's file), each op one run of it."""
        return pgbench.request_load(self)


def looked(result: WorkloadResult, srv: Running, pid: int, tool: str) -> None:
    """The trial's evidence from the server's shared memory segment (postmaster `pid`),
    read with the server up, and what ran it."""
    result.evidence.update(segment.read_required(pid))
    result.info = {"tool": tool, "server_output_tail": trialinfo.tail(srv.handle),
                   "prewarmed_blocks": srv.loaded}


KIND = Kind(
    keys=keys_of(Postgres),
    name="postgres", workload=Postgres,
    summary="PostgreSQL loaded by pgbench, with huge_pages / huge_page_size per arm",
    role="server", where=frozenset({"host", "guest", "domain", "interleaved"}),
    test_packages=("postgresql",), duration=("duration_s", 10.0), interleave=server_problem,
    leftovers=leftovers.remove_leftovers, guest_build=guestcost.guest_build,
    fill_seconds=fillcost.fill_seconds)
