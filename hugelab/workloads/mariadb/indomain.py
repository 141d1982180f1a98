"""What a MariaDB trial inside a user's libvirt domain (`domain = NAME` arms) does that is its
own; the trial itself is the server kinds' one life cycle (hugelab.workloads.serverkind, its
server placed by serverplace.InDomain, hugelab.workloads.guestside.DomainServers): the guest's
own mariadbd over a datadir made in the guest by its mariadb-install-db (`install`, before the
server starts), the server started as a transient systemd service (`daemon_argv`: mariadbd has
no daemon mode of its own) with the arm's --large-pages, the tables made by the guest's sysbench
`prepare` (or the user's SQL dump loaded by the guest's client: `build`, before the load), the
guest's sysbench as its OLTP load, and the server's own mappings and error log, read in the
guest (`look`), as evidence. The datadir and its tables are the domain's layer's where one is
built (`guest_build`, hugelab.vm.domains.layer: made and filled once, moved into each trial's
directory). The guest's pool is the arm's guest layer, sized from the server's
need (`Mariadb.hugetlb_bytes_for`). Everything is undone at the end of the trial."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hugelab.errors import WorkloadError
from hugelab.workloads.guestside import (
    GUEST_DIR,
    LOADED,
    DomainHandle,
    DomainServers,
    GuestSide,
    LayerBuild,
    Way,
    keep,
    marked,
)
from hugelab.workloads.mariadb import datadir, oltp, server, userdata
from hugelab.workloads.mariadb.userdata import sha256

PORT = 13306  # on the guest's loopback; not 3306, where the guest's own server may listen
UNIT = "hugelab-mariadbd"
TOP = Path(GUEST_DIR)  # the server's directory in the guest: its datadir, socket and log
LOG = f"{GUEST_DIR}/error.log"
TEMPLATE = "/var/lib/hugelab-layer/mariadb"  # the layer's datadir (hugelab.vm.domains.layer)
BUILD_SETTINGS = (("innodb_fast_shutdown", 0),)  # a clean datadir for every copy to start on


def daemon_argv(argv: list[str], pidfile: str) -> list[str]:
    """mariadbd as a transient systemd service with its pid in `pidfile` (pure)."""
    own = [a for a in argv if not a.startswith("--pid-file=")]
    return ["systemd-run", f"--unit={UNIT}", "--quiet", "--collect", *own,
            f"--pid-file={pidfile}"]


def install(side: GuestSide, top: str) -> None:
    """The trial's datadir: the layer's, moved in (its tables made already), or an empty one
    for mysql, root by unix socket only."""
    side.need(server.SERVER, "mariadb-server")
    if marked(side, f"{TEMPLATE}/{LOADED}"):
        side.run(["mv", TEMPLATE, f"{top}/data"])
        side.notes["data"] = "the domain's layer"
        return
    side.notes["data"] = "made in the trial"
    side.run(["mariadb-install-db", "--no-defaults", f"--user={datadir.USER}",
              f"--datadir={top}/data", "--skip-test-db",
              "--auth-root-authentication-method=socket"], timeout=600)


def guest_build(w: Any) -> LayerBuild:
    """Mariadb workload `w`'s layer (hugelab.vm.domains.layer): its datadir made and its tables
    filled once, by sysbench's prepare or the user's dump (by its content)."""
    if w.dump:
        data: dict[str, object] = {"dump": sha256(Path(w.dump))}
        what = f"MariaDB's tables from {Path(w.dump).name}"
    else:
        data = {"tables": w.tables, "table_size": w.table_size}
        what = f"MariaDB's tables by sysbench prepare ({w.tables} x {w.table_size} rows)"
    key = json.dumps({"kind": "mariadb", "database": w.database, **data}, sort_keys=True)
    return LayerBuild(key, what, lambda way: layer(w, way))


def layer(w: Any, way: Way) -> None:
    """In the layer's copy of the domain: a datadir made and filled as a trial would make it,
    its server stopped cleanly (a slow shutdown: nothing left to recover), the datadir marked
    LOADED and moved to TEMPLATE, where every trial's copy finds it (`install`)."""
    def made(side: GuestSide, top: str) -> None:
        install(side, top)
        side.later("the datadir kept for the layer", lambda: keep(side, f"{top}/data", TEMPLATE))

    servers = DomainServers(way, PORT, daemon_argv, owner=datadir.USER, log=LOG, prepare=made)
    handle = servers.start(lambda port: server.argv(TOP, port, "128M", False, BUILD_SETTINGS),
                           "mariadbd")
    try:
        _fill(w, handle.side, PORT)
        handle.side.run(["touch", f"{TOP}/data/{LOADED}"])
    finally:
        handle.stop()
    if not marked(handle.side, f"{TEMPLATE}/{LOADED}"):
        raise WorkloadError(f"mariadbd in guest {way.name}: the filled datadir was not kept at "
                            f"{TEMPLATE} ({'; '.join(handle.side.undone)})")


def build(w: Any, way: Way, port: int) -> None:
    """Mariadb workload `w`'s database and user in the guest's running server, and its tables:
    the user's dump, or sysbench's `prepare`; nothing where the layer's datadir has them."""
    side = GuestSide(way, "mariadbd")  # nothing of its to undo: the server's directory goes
    if not marked(side, f"{TOP}/data/{LOADED}"):
        _fill(w, side, port)


def _fill(w: Any, side: GuestSide, port: int) -> None:
    side.run(["mariadb", f"--socket={TOP}/sock", "-uroot", "-e",
              f"CREATE DATABASE IF NOT EXISTS `{w.database}`; " + userdata.GRANT], timeout=600)
    if w.dump:
        guest = f"{TOP}/dump.sql"
        side.put(guest, Path(w.dump).read_text())
        side.run(userdata.load_argv(TOP / "sock", w.database, Path(guest)), timeout=3600)
        return
    side.run(oltp.argv("oltp_read_only", port, w.tables, w.table_size, 2, 0, step="prepare",
                       database=w.database), timeout=3600)


def look(handle: DomainHandle) -> tuple[str, list[dict[str, int]], str]:
    """The guest's server's error log and its mappings in huge pages, read while it runs, and
    where its data came from (the domain's layer, or made in the trial: `install`)."""
    log = handle.side.way_read(LOG) or ""
    return (log, server.hugetlb_mappings(handle.side.smaps(handle.pid)),
            str(handle.side.notes.get("data", "made in the trial")))
