"""A user's own data as a MariaDB trial's starting point: an SQL dump (mariadb-dump's output),
loaded once with the `mariadb` client into a datadir cached by the dump's sha256 and the
server's version, or a datadir of theirs, copied per trial and never opened in place.

The load is then the user's own sysbench Lua script: sysbench's OLTP scripts need its sbtest
tables, so they are refused before any trial when the dump creates none (or the datadir's
database holds none). Either way the load connects as hugelab's `sbtest` user: a dump's template
gets it when it is built; a datadir's copy through the server's --init-file at start (the copy
only: a user of that name in the original is replaced in the copy)."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from hugelab.errors import ExperimentError
from hugelab.owned import file_sha256
from hugelab.proc import run
from hugelab.workloads.mariadb import datadir

CHUNK = 1 << 20
_SBTEST = re.compile(rb"CREATE TABLE (IF NOT EXISTS )?[`\"]?sbtest\d", re.IGNORECASE)
GRANT = ("CREATE OR REPLACE USER 'sbtest'@'%'; GRANT ALL ON *.* TO 'sbtest'@'%';")
INIT_FILE = "hugelab-init.sql"


def sha256(path: Path) -> str:
    return file_sha256(path)


def creates_sbtest(path: Path) -> bool:
    """Whether a dump creates one of sysbench's sbtest tables (read in overlapping chunks)."""
    tail = b""
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            if _SBTEST.search(tail + block):
                return True
            tail = block[-64:]
    return False


def dump_key(version: str, digest: str, database: str) -> str:
    """The cached datadir's name for a dump: its content and the server's version (pure)."""
    recipe = f"dump:{datadir.TEMPLATE_FORMAT}:{version}:{database}:{digest}"
    return "dump-" + hashlib.sha256(recipe.encode()).hexdigest()[:20]


def load_argv(sock: Path, database: str, dump: Path) -> list[str]:
    """The mariadb client as root over the build's socket, the dump read by the client
    (`source`), stopping at its first error (pure)."""
    return ["mariadb", f"--socket={sock}", "-uroot", database, "-e", f"source {dump}"]


def check(dump: str | None, data: str | None, script: str, database: str,
          tables: int, builtin: bool) -> None:
    """A user's dump or datadir, before any trial: readable, and with sysbench's tables when a
    built-in OLTP script is the load; ExperimentError otherwise."""
    if dump and data:
        raise ExperimentError("mariadb: give dump or datadir, not both")
    if not re.fullmatch(r"[A-Za-z0-9_$]{1,64}", database):
        raise ExperimentError(f"mariadb: database {database!r} is not a plain name (letters, "
                              "digits, _ and $)")
    if dump and not Path(dump).is_file():
        raise ExperimentError(f"mariadb: dump {dump!r} is not a file")
    if data and not (Path(data) / "mysql").is_dir():
        raise ExperimentError(f"mariadb: datadir {data!r} is not a MariaDB data directory "
                              "(no mysql/ system database)")
    if not builtin or not (dump or data):
        return
    if dump:
        found = creates_sbtest(Path(dump))
    else:
        found = all((Path(str(data)) / database / f"sbtest{i}.frm").is_file()
                    for i in range(1, tables + 1))
    if not found:
        raise ExperimentError(
            f"mariadb: script {script!r} needs sysbench's sbtest tables "
            f"({tables} of them), and the {'dump' if dump else 'datadir'} has none",
            hint="give your own load as script = \"/path/to/load.lua\" (a sysbench script)")


def copy_datadir(src: Path, top: Path) -> Path:
    """The user's datadir into `top`/data (reading it only; symbolic links followed, so a
    table kept elsewhere is copied too), made the copy's own: owned by mysql, 0700; and the
    init file that gives the load its user in the copy."""
    data = top / "data"
    run(["cp", "-a", "-L", "--", str(src), str(data)])
    uid, gid = datadir.user_ids()
    run(["chown", "-R", f"{uid}:{gid}", "--", str(data)])
    os.chmod(data, 0o700)
    init = top / INIT_FILE
    init.write_text(GRANT + "\n")
    os.chown(init, uid, gid)
    return data
