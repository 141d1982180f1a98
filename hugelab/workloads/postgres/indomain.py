"""What a PostgreSQL trial inside a user's libvirt domain (`domain = NAME` arms) does that is its
own; the trial itself is the server kinds' one life cycle (hugelab.workloads.serverkind, its
server placed by serverplace.InDomain, hugelab.workloads.guestside.DomainServers). Before the
server starts (`prepare`): the guest's own PostgreSQL found (under /usr/lib/postgresql/<version>/
bin, Debian's layout, or the workload's `bindir`) and linked at BIN, where every later step runs
it; a cluster made by its initdb; the guest's pool grown by what that server says it needs
(`postgres -C shared_memory_size_in_huge_pages`, with the arm's settings). The cluster is the
domain's layer's where one is built (`guest_build`, hugelab.vm.domains.layer: made and filled
once, then moved into each trial's directory, so a trial at scale 100 does not fill its own);
else the trial makes and fills its own. The server
(`server_argv`) has the arm's settings (huge_pages, huge_page_size, the app's) as options, its
private socket in the trial's directory and a listener on the guest's 127.0.0.1:PORT, and runs
as a transient systemd service (`daemon_argv`: it has no daemon mode of its own) that is started
once the server says it is ready (sd_notify) and writes its pid to external_pid_file. The load
(`load`): the cluster filled by the guest's pgbench (or the user's dump, restored as on the
host), pg_prewarm, then pgbench in the guest. Its evidence (`look`): the postmaster's own segment
in the guest's smaps. Everything is undone at the end of the trial (the base's stop)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from hugelab.errors import WorkloadError
from hugelab.workloads.guestside import (
    GUEST_DIR,
    LOADED,
    PAGE_KB,
    DomainHandle,
    DomainServers,
    GuestSide,
    LayerBuild,
    Way,
    keep,
    marked,
)
from hugelab.workloads.postgres import pgbench, prewarm, segment, server, userdata
from hugelab.workloads.serverside import LOOPBACK

ROOT = "/usr/lib/postgresql"
USER = "postgres"
PORT = 15432  # on the guest's loopback; not 5432, where the guest's own server may listen
UNIT = "hugelab-postgres"
BIN = f"{GUEST_DIR}/bin"  # the guest's binaries (find_bindir), linked in the trial's directory
DATA = f"{GUEST_DIR}/data"
LOG = f"{GUEST_DIR}/server.log"
START_TIMEOUT_S = 300.0  # initdb, and the server's start, under TCG
# the layer's cluster (hugelab.vm.domains.layer): made once by `build`, moved to DATA by each
# trial's `prepare`; LOADED in a cluster the layer filled (the trial loads nothing more)
TEMPLATE = "/var/lib/hugelab-layer/postgres"
BUILD_SETTINGS: dict[str, object] = {"huge_pages": "off", "fsync": "off"}  # never `try`


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


def options(settings: dict[str, object]) -> list[str]:
    """`-c key=value` for every setting (pure)."""
    return [a for key, value in settings.items()
            for a in ("-c", f"{key}={server.setting_text(value)}")]


def server_argv(settings: dict[str, object], port: int) -> list[str]:
    """The guest's server over DATA in the foreground: its private socket in the trial's
    directory, its listener on 127.0.0.1:`port`, and every setting (pure)."""
    own = {"listen_addresses": LOOPBACK, "unix_socket_directories": GUEST_DIR, "port": port}
    return [f"{BIN}/postgres", "-D", DATA, *options({**own, **settings})]


def daemon_argv(argv: list[str], pidfile: str) -> list[str]:
    """The server as a transient systemd service of the postgres user, started once it says
    it is ready (Type=notify), its output in LOG, its pid in `pidfile` (pure)."""
    return ["systemd-run", f"--unit={UNIT}", "--quiet", "--collect", f"--uid={USER}",
            "-p", "Type=notify", "-p", f"TimeoutStartSec={int(START_TIMEOUT_S)}",
            "-p", f"StandardOutput=append:{LOG}", *argv, "-c", f"external_pid_file={pidfile}"]


def prepare(w: Any, side: GuestSide) -> None:
    """Before Postgres workload `w`'s server starts: the guest's binaries linked at BIN, the
    cluster (the layer's, moved from TEMPLATE, or one made by its initdb), the guest's pool
    grown by what that server needs for the arm's backing (kept in `side.notes` with the
    bindir, for the trial's info)."""
    if marked(side, f"{TEMPLATE}/{LOADED}"):
        _linked(w, side)
        side.run(["mv", TEMPLATE, DATA])
        side.notes["data"] = "the domain's layer"
    else:
        _made(w, side)
        side.notes["data"] = "made in the trial"
    backing = w.arm_backing or "4k"
    settings = w.settings(backing)
    if backing in PAGE_KB and settings.get("huge_pages") != "off":
        pages = int(side.run([f"{BIN}/postgres", "-D", DATA, "-C",
                              "shared_memory_size_in_huge_pages", *options(settings)],
                             user=USER).stdout.strip() or 0)
        side.notes["guest_pool"] = side.grow_pool(backing, pages * PAGE_KB[backing] * 1024)


def _linked(w: Any, side: GuestSide) -> None:
    side.notes["bindir"] = bindir = find_bindir(side, w.bindir)
    side.run(["ln", "-s", bindir, BIN])


def _made(w: Any, side: GuestSide) -> None:
    """The guest's binaries linked at BIN and a cluster made at DATA by its initdb."""
    _linked(w, side)
    side.run([f"{BIN}/initdb", "-D", DATA, "-U", USER, "-A", "trust", "-E", "UTF8",
              "--locale=C", "--no-sync", "--no-instructions"], user=USER,
             timeout=START_TIMEOUT_S)


def guest_build(w: Any) -> LayerBuild:
    """Postgres workload `w`'s layer (hugelab.vm.domains.layer): its cluster made and filled
    once, by pgbench at its scale or from the user's dump (by its content)."""
    if w.dump:
        path = Path(w.dump)
        data = {"dump": userdata.sha256(path), "format": userdata.check_dump(w.dump)}
        what = f"PostgreSQL's cluster restored from {path.name}"
    else:
        data = {"scale": w.scale}
        what = f"PostgreSQL's cluster filled by pgbench -i -s {w.scale}"
    key = json.dumps({"kind": "postgres", "bindir": w.bindir, **data}, sort_keys=True)
    return LayerBuild(key, what, lambda way: build(w, way))


def build(w: Any, way: Way) -> None:
    """In the layer's copy of the domain: a cluster made and filled as a trial would make it,
    its server stopped cleanly, the cluster marked LOADED and moved to TEMPLATE, where every
    trial's copy finds it (`prepare`); WorkloadError when it could not be kept."""
    def made(side: GuestSide, _top: str) -> None:
        _made(w, side)
        side.later("the cluster kept for the layer", lambda: keep(side, DATA, TEMPLATE))

    servers = DomainServers(way, PORT, daemon_argv, owner=USER, log=LOG, prepare=made,
                            ready_s=START_TIMEOUT_S)
    handle = servers.start(lambda port: server_argv(dict(BUILD_SETTINGS), port), "postgres")
    try:
        _fill(w, handle.side)
        handle.side.run(["touch", f"{DATA}/{LOADED}"], user=USER)
    finally:
        handle.stop()
    if not marked(handle.side, f"{TEMPLATE}/{LOADED}"):
        raise WorkloadError(f"postgres in guest {way.name}: the filled cluster was not kept "
                            f"at {TEMPLATE} ({'; '.join(handle.side.undone)})")


def _fill(w: Any, side: GuestSide) -> None:
    """The cluster filled: the user's dump restored as on the host, or pgbench -i."""
    if w.dump:  # restored as on the host (userdata.restore_steps)
        dump = f"{GUEST_DIR}/dump"
        side.put_bytes(dump, Path(w.dump).read_bytes(), owner=USER)
        for argv in userdata.restore_steps(Path(BIN), userdata.check_dump(w.dump), Path(dump),
                                           Path(GUEST_DIR), PORT):
            side.run(argv, user=USER, timeout=1800)
    else:
        side.run([f"{BIN}/pgbench", "-i", "-q", "-s", str(w.scale), "-h", GUEST_DIR, "-p",
                  str(PORT), "-U", USER, "postgres"], user=USER, timeout=1800)


def load(w: Any, way: Way) -> tuple[int, dict[str, float], np.ndarray]:
    """Postgres workload `w`'s load in the guest: its data (the user's dump, restored as on the
    host, or pgbench -i), pg_prewarm (`prewarm`), the warm-up, then the measured pgbench run:
    the blocks prewarmed, pgbench's summary and every transaction's latency in µs."""
    side = GuestSide(way, "postgres")  # nothing of its to undo: the trial's directory goes
    if not marked(side, f"{DATA}/{LOADED}"):  # the layer's cluster is filled already
        _fill(w, side)
    blocks = 0
    if w.prewarm:
        res = side.run(prewarm.argv(f"{BIN}/psql", GUEST_DIR, PORT, USER), user=USER,
                       timeout=START_TIMEOUT_S)
        blocks = prewarm.blocks_read(res.stdout, res.stderr)
    if w.warmup_s >= 1:
        _pgbench(side, w, w.warmup_s, log=False)
    res = _pgbench(side, w, None if w.transactions is not None else w.duration_s, log=True)
    logs = [f"{GUEST_DIR}/{n}" for n in side.run(["ls", GUEST_DIR]).stdout.split()
            if n.startswith("pgbench.")]
    return blocks, pgbench.summary(res.stdout), pgbench.log_latencies_us(
        [way.read_file(p) for p in logs])


def _pgbench(side: GuestSide, w: Any, seconds: float | None, *, log: bool) -> Any:
    script = None
    if w.script:
        script = f"{GUEST_DIR}/script.sql"
        side.put(script, Path(w.script).read_text(), owner=USER)
    argv = pgbench.argv(Path(f"{BIN}/pgbench"), Path(GUEST_DIR), PORT, builtin=w.builtin,
                        script=script, clients=w.clients, threads=w.threads, seconds=seconds,
                        transactions=w.transactions if seconds is None else None,
                        log_prefix=Path(f"{GUEST_DIR}/pgbench") if log else None)
    return side.run(argv, user=USER, timeout=w.exec_timeout(seconds or w.duration_s))


def look(handle: DomainHandle) -> tuple[dict[str, Any], dict[str, Any]]:
    """The postmaster's segment in the guest (its evidence), read while it runs, and what the
    trial's info says of the guest: its client, the server's version, what `prepare` found,
    the guest's changes (`undone`: filled when the server stops)."""
    side, name = handle.side, handle.side.way.name
    evidence = segment.check_segment(side.smaps(handle.pid))
    if "error" in evidence:
        raise WorkloadError(f"postgres in guest {name}: {evidence['error']}")
    evidence.update({"postmaster_pid": handle.pid, "where": f"guest {name}"})
    version = side.run([f"{BIN}/postgres", "--version"]).stdout.strip()
    return evidence, {"where": "domain", "client": f"guest {name}", "version": version,
                      **side.notes, "undone": side.undone}


def info(w: Any, backing: str, own: dict[str, Any]) -> dict[str, Any]:
    """Postgres workload `w`'s trial info in a user's domain on `backing`; `own`: the
    trial's tool and prewarmed blocks, and what `look` said."""
    return {"where": "domain", "client": own["client"],
            **({"guest_pool": own["guest_pool"]} if "guest_pool" in own else {}),
            **({"prewarmed_blocks": own["prewarmed_blocks"]} if w.prewarm else {}),
            "tool": own["tool"], "version": own["version"], "backing": backing,
            "settings": w.settings(backing), "builtin": w.script or w.builtin,
            "bindir": own["bindir"], "warnings": w.settings_warnings(backing),
            "data": own.get("data", "made in the trial"),
            **({"dump": w.dump} if w.dump else {}),
            "guest_changes_undone": list(own["undone"])}
