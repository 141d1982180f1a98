"""A PostgreSQL trial inside a user's libvirt domain (`domain = NAME` arms), driven from the
host through the way in (hugelab.workloads.guestside): the guest's own PostgreSQL (found under
/usr/lib/postgresql/<version>/bin, Debian's layout, or the workload's `bindir`), a cluster made
in the guest by its initdb and filled by its pgbench (or the user's SQL dump), the arm's
settings (huge_pages, huge_page_size, the app's) in the cluster's postgresql.auto.conf, the
guest's pool grown by what the server itself says it needs (`postgres -C
shared_memory_size_in_huge_pages`), pgbench in the guest as the load, and the postmaster's own
segment in the guest's smaps as evidence. Everything is undone at the end of the trial.

Its own whole trial (Postgres.whole_trial), not the server kinds' base with DomainServers as
MariaDB's, Redis's and memcached's: the guest's binaries are found in the guest, and every step
after runs them (initdb; the guest's pool grown by what that server says it needs, after
initdb and before the start, for the arm's backing; pg_ctl, pgbench, psql, its version), state
one trial finds that the base's hooks (a frozen kind, `server_argv(port, files)`) have no
place for; and its server listens on its private socket only, its readiness pg_ctl's own
wait, where DomainServers waits for a TCP listener and a pid file of its pid alone. Its parts
are the host's: pgbench's argv, summary, latencies and metrics, pg_prewarm, the restore steps,
the setting texts and the segment's check."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from hugelab.errors import PoolBusyError, WorkloadError
from hugelab.workloads.base import WorkloadResult
from hugelab.workloads.guestside import PAGE_KB, GuestSide, Way
from hugelab.workloads.postgres import pgbench, prewarm, segment, server, userdata

ROOT = "/usr/lib/postgresql"
USER = "postgres"
START_TIMEOUT_S = 300.0  # pg_ctl -w under TCG


def find_bindir(side: GuestSide, bindir: str | None) -> str:
    """The guest's PostgreSQL binaries: `bindir`, or the newest version under ROOT."""
    if bindir:
        side.need(f"{bindir}/postgres", "postgresql")
        return bindir
    res = side.probe(["ls", ROOT])
    versions = sorted((v for v in (res.stdout.split() if res and res.returncode == 0 else [])
                       if v.isdigit()), key=int)
    if not versions:
        side.need(f"{ROOT}/<version>/bin/postgres", "postgresql")
    return f"{ROOT}/{versions[-1]}/bin"


def conf_text(settings: dict[str, object], top: str) -> str:
    """postgresql.auto.conf for the trial: the private socket and every setting, each value
    quoted as postgresql.conf quotes strings (pure)."""
    base: dict[str, object] = {"listen_addresses": "", "unix_socket_directories": top,
                               "port": server.PORT}
    lines = ["# written by hugelab for one trial"]
    for key, value in {**base, **settings}.items():
        text = server.setting_text(value).replace("'", "''")
        lines.append(f"{key} = '{text}'")
    return "\n".join(lines) + "\n"


class DomainTrial:
    """One trial of a Postgres workload `w` in a domain (see the module docstring)."""

    def __init__(self, w: Any, way: Way, backing: str) -> None:
        self.w, self.way, self.backing = w, way, backing
        self.side = GuestSide(way, "postgres")
        self.info: dict[str, Any] = {"where": "domain", "client": f"guest {way.name}"}

    def run(self) -> WorkloadResult:
        with self.side:
            result = self._trial()
        result.info["guest_changes_undone"] = list(self.side.undone)
        return result

    def _trial(self) -> WorkloadResult:
        side, w = self.side, self.w
        self.bin = find_bindir(side, w.bindir)
        top = side.workdir(owner=USER)
        self.top, self.data = top, f"{top}/data"
        side.run([f"{self.bin}/initdb", "-D", self.data, "-U", USER, "-A", "trust", "-E",
                  "UTF8", "--locale=C", "--no-sync", "--no-instructions"], user=USER,
                 timeout=START_TIMEOUT_S)
        settings = w.settings(self.backing)
        side.put(f"{self.data}/postgresql.auto.conf", conf_text(settings, top), owner=USER)
        if self.backing in PAGE_KB and settings.get("huge_pages") != "off":
            pages = int(side.run([f"{self.bin}/postgres", "-D", self.data, "-C",
                                  "shared_memory_size_in_huge_pages"], user=USER
                                 ).stdout.strip() or 0)
            self.info["guest_pool"] = side.grow_pool(self.backing, pages * PAGE_KB[self.backing]
                                                     * 1024)
        self._start()
        self._load_data()
        if w.prewarm:
            res = self.side.run(prewarm.argv(f"{self.bin}/psql", self.top, server.PORT, USER),
                                user=USER, timeout=START_TIMEOUT_S)
            self.info["prewarmed_blocks"] = prewarm.blocks_read(res.stdout, res.stderr)
        if w.warmup_s >= 1:
            self._pgbench(w.warmup_s, log=False)
        res = self._pgbench(None if w.transactions is not None else w.duration_s, log=True)
        return self._result(res, settings)

    def _start(self) -> None:
        log = f"{self.top}/server.log"
        try:
            self.side.run([f"{self.bin}/pg_ctl", "-D", self.data, "-l", log, "-w", "-t",
                           str(int(START_TIMEOUT_S)), "start"], user=USER,
                          timeout=START_TIMEOUT_S + 30)
        except WorkloadError as exc:
            tail = self._log_tail()
            if any(word in tail for word in server.NO_POOL):
                raise PoolBusyError(f"postgres in guest {self.way.name} could not map its huge "
                                    f"pages:\n  {tail}") from exc
            raise WorkloadError(f"{exc.message}\n  {tail}") from exc
        self.side.later("the server stopped", lambda: self.side.run(
            [f"{self.bin}/pg_ctl", "-D", self.data, "-m", "fast", "-w", "stop"], user=USER))

    def _log_tail(self) -> str:
        try:
            text = self.way.read_file(f"{self.top}/server.log")
        except Exception:  # noqa: BLE001 - a missing log says nothing more
            return "(no server log)"
        return "\n  ".join(text.strip().splitlines()[-8:])

    def _load_data(self) -> None:
        w, side = self.w, self.side
        if w.dump:  # restored as on the host (userdata.restore_steps)
            fmt = userdata.check_dump(w.dump)
            dump = f"{self.top}/dump"
            side.put_bytes(dump, Path(w.dump).read_bytes(), owner=USER)
            for argv in userdata.restore_steps(Path(self.bin), fmt, Path(dump), Path(self.top),
                                               server.PORT):
                side.run(argv, user=USER, timeout=1800)
            return
        side.run([f"{self.bin}/pgbench", "-i", "-q", "-s", str(w.scale), "-h", self.top, "-p",
                  str(server.PORT), "-U", USER, "postgres"], user=USER, timeout=1800)

    def _pgbench(self, seconds: float | None, *, log: bool) -> Any:
        w = self.w
        script = None
        if w.script:
            script = f"{self.top}/script.sql"
            self.side.put(script, Path(w.script).read_text(), owner=USER)
        argv = pgbench.argv(Path(f"{self.bin}/pgbench"), Path(self.top), server.PORT,
                            builtin=w.builtin, script=script, clients=w.clients,
                            threads=w.threads, seconds=seconds,
                            transactions=w.transactions if seconds is None else None,
                            log_prefix=Path(f"{self.top}/pgbench") if log else None)
        return self.side.run(argv, user=USER, timeout=w.exec_timeout(seconds or w.duration_s))

    def _latencies(self) -> np.ndarray:
        listing = self.side.run(["ls", self.top]).stdout.split()
        logs = [f"{self.top}/{n}" for n in listing if n.startswith("pgbench.")]
        return pgbench.log_latencies_us([self.way.read_file(p) for p in logs])

    def _result(self, res: Any, settings: dict[str, object]) -> WorkloadResult:
        summary = pgbench.summary(res.stdout)
        pid = int(self.way.read_file(f"{self.data}/postmaster.pid").splitlines()[0])
        evidence = segment.check_segment(self.side.smaps(pid))
        if "error" in evidence:
            raise WorkloadError(f"postgres in guest {self.way.name}: {evidence['error']}")
        evidence.update({"postmaster_pid": pid, "where": f"guest {self.way.name}"})
        metrics = pgbench.window_metrics([summary], self._latencies())  # as on the host
        version = self.side.run([f"{self.bin}/postgres", "--version"]).stdout.strip()
        info = {**self.info, "tool": "pgbench", "version": version, "backing": self.backing,
                "settings": settings, "builtin": self.w.script or self.w.builtin,
                "bindir": self.bin, "warnings": self.w.settings_warnings(self.backing),
                **({"dump": self.w.dump} if self.w.dump else {})}
        return WorkloadResult(metrics=metrics, primary="tps", unit="transactions/s",
                              better="higher", evidence=evidence, info=info)
