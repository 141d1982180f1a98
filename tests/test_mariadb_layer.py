"""MariaDB in a user's domain over the domain's layer (hugelab.vm.domains.layer): the layer's
build makes the datadir and its tables once in its own copy, stops the server slowly (a clean
datadir) and keeps the datadir; a trial over it moves the datadir in and makes nothing. The
layer in a real domain: the mariadb-domain example (tests/test_examples_run.py)."""

from __future__ import annotations

import dataclasses

from hugelab.workloads.base import ExecResult
from hugelab.workloads.guestside import GUEST_DIR, LOADED, DomainHandle, GuestSide
from hugelab.workloads.mariadb import indomain
from hugelab.workloads.mariadb.workload import Mariadb
from tests.wayin import ScriptedWay


class MariadbWay(ScriptedWay):
    """A user's domain whose mariadbd listens on hugelab's port and ends when killed."""

    PID = 5151

    def __init__(self) -> None:
        super().__init__({
            "/proc/net/tcp": f"  sl  local_address\n   0: 0100007F:{indomain.PORT:04X} 0:0 0A\n",
            f"{GUEST_DIR}/mariadbd.pid": f"{self.PID}\n", f"/proc/{self.PID}/stat": "5151 (m) S",
            "/usr/sbin/mariadbd": "ELF"})

    def exec(self, argv, *, timeout=None):
        self.log.append(list(argv))
        prog = argv[0].rsplit("/", 1)[-1]
        if prog == "kill":
            self.files.pop(f"/proc/{self.PID}/stat", None)
        code = self.file_op(prog, list(argv))
        return ExecResult(list(argv), code or 0, "", "", 0.01)


def _progs(way: MariadbWay) -> list[str]:
    return [a[0].rsplit("/", 1)[-1] for a in way.log]


def test_the_layers_build_makes_fills_stops_slowly_then_keeps_the_datadir():
    way = MariadbWay()
    w = dataclasses.replace(Mariadb(), tables=2, table_size=300)
    build = w.guest_build()
    assert build is not None and '"table_size": 300' in build.key and "2 x 300" in build.what
    build.build(way)  # type: ignore[arg-type]
    progs, ran = _progs(way), way.log
    daemon = ran[progs.index("systemd-run")]
    assert "--innodb-fast-shutdown=0" in daemon and "--large-pages" not in daemon
    assert daemon.index("--innodb-fast-shutdown=2") < daemon.index("--innodb-fast-shutdown=0")
    prepare = next(a for a in ran if a[0] == "sysbench")
    assert "prepare" in prepare and "--tables=2" in prepare and "--table-size=300" in prepare
    keep = ran.index(["mv", f"{GUEST_DIR}/data", indomain.TEMPLATE])
    assert progs.index("mariadb-install-db") < progs.index("systemd-run") < \
        progs.index("sysbench") < progs.index("touch") < progs.index("kill") < keep
    assert ran[keep + 1] == ["rm", "-rf", GUEST_DIR]
    assert f"{indomain.TEMPLATE}/{LOADED}" in way.files
    assert Mariadb().guest_build().key != build.key  # type: ignore[union-attr]


def test_a_trial_over_the_layer_moves_the_datadir_in_and_makes_nothing():
    way = MariadbWay()
    way.files[f"{indomain.TEMPLATE}/{LOADED}"] = ""
    side = GuestSide(way, "mariadbd")  # type: ignore[arg-type]
    indomain.install(side, GUEST_DIR)
    indomain.build(Mariadb(), way, indomain.PORT)  # type: ignore[arg-type]
    assert ["mv", indomain.TEMPLATE, f"{GUEST_DIR}/data"] in way.log
    assert not {"mariadb-install-db", "mariadb", "sysbench"} & set(_progs(way))
    assert _data(side) == "the domain's layer"
    bare = MariadbWay()  # no layer: the trial makes its own, as before
    bare_side = GuestSide(bare, "mariadbd")  # type: ignore[arg-type]
    indomain.install(bare_side, GUEST_DIR)
    indomain.build(Mariadb(), bare, indomain.PORT)  # type: ignore[arg-type]
    assert {"mariadb-install-db", "mariadb", "sysbench"} <= set(_progs(bare))
    assert _data(bare_side) == "made in the trial"


def _data(side: GuestSide) -> str:
    """What a trial's info says of its data, as PostgreSQL's does: read through the handle
    while the server runs (last_look), then written by `loaded`."""
    way = side.way
    way.files[f"/proc/{MariadbWay.PID}/smaps"] = ""  # type: ignore[attr-defined]
    w = Mariadb()
    run = "transactions:  80  (16.00 per sec.)\nsysbench 1.0.20\n"
    look = w.last_look(ExecResult([], 0, run, "", 0.0),
                       DomainHandle(indomain.PORT, side, MariadbWay.PID, "mariadbd"), None)
    result = w.loaded(look, "", way)  # type: ignore[arg-type]
    assert result.info["where"] == "domain"
    return str(result.info["data"])
