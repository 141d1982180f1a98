"""A MariaDB trial inside a user's libvirt domain (`domain = NAME` arms), driven from the host
through the way in (hugelab.workloads.guestside): the guest's own mariadbd, a datadir made in
the guest by its mariadb-install-db, the server started as a transient systemd service
(`systemd-run`: mariadbd has no daemon mode of its own) with the arm's --large-pages, the tables
made by the guest's sysbench `prepare` (or the user's SQL dump loaded by the guest's client),
sysbench's OLTP load in the guest, and the server's own mappings and error log, read in the
guest, as evidence. The guest's pool is the arm's guest layer, sized from the server's need
(`Mariadb.hugetlb_bytes_for`). Everything is undone at the end of the trial."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from hugelab.errors import WorkloadError
from hugelab.workloads.base import WorkloadResult
from hugelab.workloads.guestside import DomainHandle, DomainServers, GuestSide, Way
from hugelab.workloads.mariadb import datadir, evidence, oltp, server, userdata

PORT = 13306  # on the guest's loopback; not 3306, where the guest's own server may listen
UNIT = "hugelab-mariadbd"


def daemon_argv(argv: list[str], pidfile: str) -> list[str]:
    """mariadbd as a transient systemd service with its pid in `pidfile` (pure)."""
    own = [a for a in argv if not a.startswith("--pid-file=")]
    return ["systemd-run", f"--unit={UNIT}", "--quiet", "--collect", *own,
            f"--pid-file={pidfile}"]


def install(side: GuestSide, top: str) -> None:
    """An empty datadir for mysql in the trial's directory, root by unix socket only."""
    side.need(server.SERVER, "mariadb-server")
    side.run(["mariadb-install-db", "--no-defaults", f"--user={datadir.USER}",
              f"--datadir={top}/data", "--skip-test-db",
              "--auth-root-authentication-method=socket"], timeout=600)


class DomainTrial:
    """One trial of a Mariadb workload `w` in a domain (see the module docstring)."""

    def __init__(self, w: Any, way: Way, backing: str) -> None:
        self.w, self.way, self.backing = w, way, backing
        self.top = Path("/var/tmp/hugelab")

    def run(self) -> WorkloadResult:
        w = self.w
        large, pool = w.large_pages(), str(w.buffer_pool_bytes())
        side = DomainServers(self.way, PORT, daemon_argv, owner=datadir.USER, prepare=install,
                             log=f"{self.top}/error.log")
        handle = side.start(lambda port: server.argv(self.top, port, pool, large,
                                                     w.settings()), "mariadbd")
        try:
            self._load(handle)
            if w.warmup_s >= 1:
                self._sysbench(w.warmup_s)
            res = self._sysbench(w.duration_s)
            return self._result(handle, res, large)
        finally:
            handle.stop()

    def _sql(self, handle: DomainHandle, sql: str, database: str = "") -> None:
        handle.side.run(["mariadb", f"--socket={self.top}/sock", "-uroot",
                         *([database] if database else []), "-e", sql], timeout=600)

    def _load(self, handle: DomainHandle) -> None:
        """The load's database and user, and its tables: the user's dump, or sysbench's."""
        w = self.w
        self._sql(handle, f"CREATE DATABASE IF NOT EXISTS `{w.database}`; " + userdata.GRANT)
        if w.dump:
            guest = f"{self.top}/dump.sql"
            handle.side.put(guest, Path(w.dump).read_text())
            handle.side.run(userdata.load_argv(self.top / "sock", w.database, Path(guest)),
                            timeout=3600)
            return
        handle.side.run(oltp.argv("oltp_read_only", PORT, w.tables, w.table_size, 2, 0,
                                  step="prepare", database=w.database), timeout=3600)

    def _sysbench(self, seconds: float) -> Any:
        w = self.w
        argv = oltp.argv(w.script, PORT, w.tables, w.table_size, w.threads, seconds,
                         database=w.database)
        res = self.way.exec(argv, timeout=w.exec_timeout())
        if res.returncode != 0:
            raise WorkloadError(f"sysbench in guest {self.way.name} exited with "
                                f"{res.returncode}: {(res.stderr or res.stdout)[-300:]}")
        return res

    def _result(self, handle: DomainHandle, res: Any, large: bool) -> WorkloadResult:
        w = self.w
        metrics = oltp.parse(res.stdout)
        lat = oltp.latencies_ms(res.stdout)
        if lat.size:
            for p in oltp.PERCENTILES:
                metrics[f"p{p:g}_ms"] = float(np.percentile(lat, p))
        log = handle.side.way_read(f"{self.top}/error.log") or ""
        maps = server.hugetlb_mappings(handle.side.smaps(handle.pid))
        result = WorkloadResult(metrics=metrics, primary="tps", unit="transactions/s",
                                better="higher")
        # the server's own tree: the guest's sampled tree is sysbench's
        evidence.record(result, large, w.buffer_pool_bytes(), log, maps, handle.memory(),
                        f"guest {self.way.name}")
        result.info.update({"tool": "sysbench", "script": w.script, "backing": self.backing,
                            "where": "domain", "client": f"guest {self.way.name}",
                            "server_version": evidence.server_version(log)})
        if w.dump:
            result.info["user_data"] = {"dump": w.dump}
        return result

