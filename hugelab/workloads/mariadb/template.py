"""Template datadirs, built once and kept in the cache (datadir.templates(), by key), then copied
for each trial: mariadb-install-db and sysbench's `prepare` per server version, tables and table
size, or mariadb-install-db and a user's SQL dump loaded (userdata.py) per dump content and
version. Built under a lock (hugelab.owned.TemplateCache), so two runs that need one at once
build it once."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hugelab.proc import run
from hugelab.workloads.mariadb import datadir, oltp, server, userdata

_TEMPLATES: dict[str, Path] = {}


def source(w: Any) -> Path:
    """What each trial's datadir of a Mariadb workload `w` is copied from: the user's datadir,
    the one loaded from their dump, or sysbench's tables (both cached)."""
    if w.datadir:
        return Path(w.datadir)
    if w.dump:
        return ensure_dump_template(w.dump, w.database)
    return ensure_template(w.tables, w.table_size)


def trial_dir(w: Any) -> Path:
    """A trial's private datadir (mysql's, 0700, under datadir.work_path()) copied from what
    `source` gives; the caller removes it."""
    tpl = source(w)
    top = datadir.new_dir("trial")
    try:
        if w.datadir:
            userdata.copy_datadir(tpl, top)
        else:
            datadir.copy_template(tpl, top)
    except BaseException:
        shutil.rmtree(top, ignore_errors=True)
        raise
    return top


def ensure_template(tables: int, table_size: int) -> Path:
    """The cached datadir for (server version, tables, table size), built once (minutes for
    large tables) and copied per trial."""
    version = run([server.SERVER, "--version"]).stdout.strip()
    key = datadir.template_key(version, tables, table_size)
    dest = _cached(key, lambda top: _build(top, tables, table_size))
    datadir.check_template(dest)
    return dest


def ensure_dump_template(dump: str, database: str) -> Path:
    """The cached datadir a user's SQL dump was loaded into once, by its sha256 and the
    server's version; the dump is only read."""
    path = Path(dump)
    st = path.stat()
    memo = f"{path}:{st.st_size}:{st.st_mtime_ns}:{database}"
    if memo not in _TEMPLATES:
        version = run([server.SERVER, "--version"]).stdout.strip()
        key = userdata.dump_key(version, userdata.sha256(path), database)
        _TEMPLATES[memo] = _cached(key, lambda top: _load_dump(top, path, database))
    return _TEMPLATES[memo]


def _cached(key: str, build: Callable[[Path], None]) -> Path:
    """The template `key` from the cache, built once by `build` in a private directory of
    its own (hugelab.owned.TemplateCache: under a lock, so two runs build it once)."""
    if key not in _TEMPLATES:
        _TEMPLATES[key] = datadir.templates().ensure(key, lambda tmp: _built(tmp, build))
    return _TEMPLATES[key]


def _built(tmp: Path, build: Callable[[Path], None]) -> None:
    with datadir.private_dir("template") as top:
        build(top)
        run(["cp", "-a", "--", str(top / "data"), str(tmp)])


def _load_dump(top: Path, dump: Path, database: str) -> None:
    """A fresh datadir with the dump loaded (into `database` unless it says otherwise) and
    the load's user, shut down cleanly."""
    datadir.install(top / "data")
    handle = server.start(top, "64M", False, (("innodb_fast_shutdown", 0),))
    try:
        sock = f"--socket={top / 'sock'}"
        run(["mariadb", sock, "-uroot", "-e", f"CREATE DATABASE IF NOT EXISTS `{database}`; "
             + userdata.GRANT], timeout=60)
        run(userdata.load_argv(top / "sock", database, dump), timeout=3600)
        run(["mariadb-admin", sock, "-uroot", "shutdown"], timeout=300)
    finally:
        handle.stop()


def _build(top: Path, tables: int, table_size: int) -> None:
    datadir.install(top / "data")
    settings = (("innodb_fast_shutdown", 0),)
    handle = server.start(top, "64M", False, settings)
    try:
        run(["mariadb", f"--socket={top / 'sock'}", "-uroot", "-e",
             f"CREATE DATABASE {datadir.DATABASE}; CREATE USER '{oltp.USER}'@'%'; "
             f"GRANT ALL ON {datadir.DATABASE}.* TO '{oltp.USER}'@'%'"], timeout=60)
        run(oltp.argv("oltp_read_only", handle.client_port, tables, table_size, 2, 0,
                      step="prepare"), timeout=3600)
        run(["mariadb-admin", f"--socket={top / 'sock'}", "-uroot", "shutdown"], timeout=300)
    finally:
        handle.stop()
