"""What a MariaDB trial inside a user's libvirt domain (`domain = NAME` arms) does that is its
own; the trial itself is the server kinds' one life cycle (hugelab.workloads.serverkind, its
server placed by serverplace.InDomain, hugelab.workloads.guestside.DomainServers): the guest's
own mariadbd over a datadir made in the guest by its mariadb-install-db (`install`, before the
server starts), the server started as a transient systemd service (`daemon_argv`: mariadbd has
no daemon mode of its own) with the arm's --large-pages, the tables made by the guest's sysbench
`prepare` (or the user's SQL dump loaded by the guest's client: `build`, before the load), the
guest's sysbench as its OLTP load, and the server's own mappings and error log, read in the
guest (`look`), as evidence. The guest's pool is the arm's guest layer, sized from the server's
need (`Mariadb.hugetlb_bytes_for`). Everything is undone at the end of the trial."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hugelab.workloads.guestside import GUEST_DIR, DomainHandle, GuestSide, Way
from hugelab.workloads.mariadb import datadir, oltp, server, userdata

PORT = 13306  # on the guest's loopback; not 3306, where the guest's own server may listen
UNIT = "hugelab-mariadbd"
TOP = Path(GUEST_DIR)  # the server's directory in the guest: its datadir, socket and log
LOG = f"{GUEST_DIR}/error.log"


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


def build(w: Any, way: Way, port: int) -> None:
    """Mariadb workload `w`'s database and user in the guest's running server, and its tables:
    the user's dump, or sysbench's `prepare`."""
    side = GuestSide(way, "mariadbd")  # nothing of its to undo: the server's directory goes
    side.run(["mariadb", f"--socket={TOP}/sock", "-uroot", "-e",
              f"CREATE DATABASE IF NOT EXISTS `{w.database}`; " + userdata.GRANT], timeout=600)
    if w.dump:
        guest = f"{TOP}/dump.sql"
        side.put(guest, Path(w.dump).read_text())
        side.run(userdata.load_argv(TOP / "sock", w.database, Path(guest)), timeout=3600)
        return
    side.run(oltp.argv("oltp_read_only", port, w.tables, w.table_size, 2, 0, step="prepare",
                       database=w.database), timeout=3600)


def look(handle: DomainHandle) -> tuple[str, list[dict[str, int]]]:
    """The guest's server's error log and its mappings in huge pages, read while it runs."""
    log = handle.side.way_read(LOG) or ""
    return log, server.hugetlb_mappings(handle.side.smaps(handle.pid))
