"""Template clusters, built once and kept in the cache (cluster.templates(), by key), then copied
for each trial: initdb and `pgbench -i -s <scale>` per PostgreSQL version and scale, or initdb
and a user's pg_dump restored (userdata.py) per dump content and version. Built under a lock,
so two runs that need one at once build it once. `for_arm`: an arm's settings judged by the
server on a copy of the template (`ask`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hugelab.errors import ExperimentError, WorkloadError
from hugelab.proc import run
from hugelab.units import amount
from hugelab.workloads import preview
from hugelab.workloads.postgres import cluster, server, sysvshm, userconf, userdata
from hugelab.workloads.preview import Build

BUILD_SETTINGS: dict[str, object] = {"huge_pages": "off", "fsync": "off"}  # never `try`
# loads a fresh cluster through its socket directory; WorkloadError when it fails
Load = Callable[[Path, cluster.ClusterDir], None]
_DUMPS: dict[tuple[str, str, int, int], Path] = {}  # (dump, version, size, mtime) -> template
_ASKED: dict[tuple[Any, ...], str] = {}  # (template, name, settings) -> the server's answer


def source(w: Any, bin_dir: Path) -> Path:
    """Where each trial's cluster of a Postgres workload `w` is copied from: the user's data
    directory, the template restored from their dump, or pgbench's at its scale (cached)."""
    if preview.active():  # a dry run builds nothing
        found = cached(w, bin_dir)
        if found is None:
            raise WorkloadError("postgres: a dry run builds no template")
        return found
    if w.datadir:
        userdata.check_major(w.datadir, cluster.version(bin_dir))
        return Path(w.datadir)
    if w.dump:
        return ensure_dump(bin_dir, w.dump)
    return ensure(bin_dir, w.scale)


def ask(w: Any, bin_dir: Path, name: str) -> str:
    """`postgres -C name` with the settings of a Postgres workload `w`'s arm, on a copy of
    its template (each answer asked once)."""
    tpl = source(w, bin_dir)
    key = (str(tpl), name, tuple(sorted((k, str(v)) for k, v in w.settings().items())))
    if key not in _ASKED:
        with cluster.private_dir("ask") as cd:
            userdata.copy(w, tpl, cd, settings_only=True)
            _ASKED[key] = server.ask(bin_dir, cd, name, w.settings())
    return _ASKED[key]


HASH_IN_PREVIEW = 1 << 30  # a dry run hashes a dump up to this size to see if it is cached


def cached(w: Any, bin_dir: Path) -> Path | None:
    """Where trials are copied from when that needs nothing built (the user's data directory,
    a template already cached), else None; builds nothing (for the dry run)."""
    if w.datadir:
        userdata.check_major(w.datadir, cluster.version(bin_dir))
        return Path(w.datadir)
    key = _dump_key(bin_dir, w.dump) if w.dump else \
        cluster.template_key(cluster.version(bin_dir), w.scale)
    dest = cluster.templates().root / key if key else None
    return dest if dest is not None and (dest / "PG_VERSION").is_file() else None


def unbuilt(w: Any, bin_dir: Path) -> bool:
    """A dry run, with no template of `w` to ask PostgreSQL with (it builds none)."""
    return preview.active() and cached(w, bin_dir) is None


def planned(w: Any, bin_dir: Path) -> list[Build]:
    """What a run of `w` builds before its first trial, read without building it: pgbench's
    template at its scale, or the user's dump restored (its size and format read, its content
    hashed when small enough to say whether it is cached); [] for a user's data directory."""
    if w.datadir:
        return []
    version = cluster.version(bin_dir).split("-")[0]  # "15.18", not its Debian suffix
    if not w.dump:
        return [Build(f"PostgreSQL {version} template: initdb, pgbench -i -s {w.scale}",
                      "pgbench_init", w.scale, cached(w, bin_dir) is not None)]
    fmt, size = userdata.check_dump(w.dump), Path(w.dump).stat().st_size
    key = _dump_key(bin_dir, w.dump)
    note = "" if key else (f"not hashed ({size / 2**30:.1f} GiB): the run hashes it and reuses "
                           "a template of the same content if one is cached")
    done = None if key is None else (cluster.templates().root / key / "PG_VERSION").is_file()
    return [Build(f"PostgreSQL {version} template: initdb, {w.dump} ({fmt} dump, "
                  f"{amount(size / 1024)}) restored, then ANALYZE", f"restore_{fmt}", size, done,
                  note)]


def _dump_key(bin_dir: Path, dump: str) -> str | None:
    """The cache key of a dump's template; None for a dump too large to hash in a preview."""
    path = Path(dump)
    if path.stat().st_size > HASH_IN_PREVIEW:
        return None
    return userdata.dump_key(cluster.version(bin_dir), userdata.sha256(path),
                             userdata.check_dump(dump))


def ensure(bin_dir: Path, scale: int) -> Path:
    """The cached template's data directory for this PostgreSQL and scale, built if missing."""
    key = cluster.template_key(cluster.version(bin_dir), scale)
    return _ensure(bin_dir, key, lambda b, cd: _pgbench_init(b, cd, scale))


def ensure_dump(bin_dir: Path, dump: str) -> Path:
    """The cached template restored from a user's dump (by its sha256 and this server's
    version), built if missing; the dump is only read."""
    path, version = Path(dump), cluster.version(bin_dir)
    st = path.stat()
    memo = (str(path.resolve()), version, st.st_size, st.st_mtime_ns)
    if memo not in _DUMPS:
        fmt = userdata.check_dump(dump)
        key = userdata.dump_key(version, userdata.sha256(path), fmt)
        _DUMPS[memo] = _ensure(bin_dir, key, lambda b, cd: _restore(b, cd, fmt, path))
    return _DUMPS[memo]


def _ensure(bin_dir: Path, key: str, load: Load) -> Path:
    return cluster.templates().ensure(key, lambda tmp: _build(bin_dir, load, tmp),
                                      ready=lambda p: (p / "PG_VERSION").is_file())


def _pgbench_init(bin_dir: Path, cd: cluster.ClusterDir, scale: int) -> None:
    cp = run([bin_dir / "pgbench", "-i", "-q", "-s", str(scale), "-h", str(cd.top),
              "-p", str(server.PORT), "-U", cluster.USER, "postgres"], check=False, timeout=3600)
    if cp.returncode != 0:
        raise WorkloadError(f"pgbench -i -s {scale} failed ({cp.returncode}):\n  "
                            + (cp.stderr or cp.stdout).strip().replace("\n", "\n  "))


def _restore(bin_dir: Path, cd: cluster.ClusterDir, fmt: str, dump: Path) -> None:
    for argv in userdata.restore_steps(bin_dir, fmt, dump, cd.top, server.PORT):
        cp = run(argv, check=False, timeout=3600)
        if cp.returncode != 0:
            raise userdata.restore_failed(argv, cp.returncode, cp.stderr or cp.stdout)


def _build(bin_dir: Path, load: Load, tmp: Path) -> None:
    with cluster.private_dir("template") as cd:
        cluster.as_postgres([bin_dir / "initdb", "-D", cd.data, "-E", "UTF8", "--locale=C",
                             "--auth=trust", "--no-sync", "-U", cluster.USER])
        srv = server.start(bin_dir, cd, BUILD_SETTINGS)
        try:
            load(bin_dir, cd)
        finally:
            srv.stop()
            sysvshm.drop_for(cd.data)  # left behind only by a postmaster that was killed
        (cd.data / "postmaster.pid").unlink(missing_ok=True)
        run(["cp", "-a", "--", str(cd.data), str(tmp)])


def for_arm(w: Any, arm: Any) -> Any:
    """Postgres workload `w` as `arm` runs it: its backing decides the huge_pages and
    huge_page_size defaults; the server checks every setting (`postgres -C`) now, before any
    trial (a user's domain: the guest's server, in the trial; a dry run: the run)."""
    vm = getattr(arm, "vm", None)
    domain = vm is not None and vm.domain is not None
    try:
        own = dataclasses.replace(w, arm_backing=arm.backing, domain_arm=domain)
        if domain:  # the guest's server judges the settings, in the trial; its user
            return own  # data was checked by replace (userdata.check_user_data)
    except ExperimentError as exc:
        raise ExperimentError(f"arm '{arm.name}': {exc.message}", hint=exc.hint) from None
    if unbuilt(own, own._bin()):
        return own  # a dry run builds no template: the run checks the settings
    try:  # the template first: a dump that cannot be restored is not a refused setting
        source(own, own._bin())
    except WorkloadError as exc:
        what = f"your dump {own.dump}" if own.dump else "the template"
        raise ExperimentError(f"arm '{arm.name}': {what} could not be made ready: "
                              f"{exc.message}", hint=exc.hint) from None
    try:
        own.ask("huge_pages")
    except WorkloadError as exc:
        said = userconf.server_words(exc.message)
        line = userconf.refused_line(own.conf, list(own.conf_items), own.app, exc.message)
        if line:  # the user's own conf: its file and line
            raise ExperimentError(f"arm '{arm.name}': postgres refused a setting of your conf, "
                                  f"{line}: {said}",
                                  hint="fix or remove that line: postgres checks every setting "
                                  "before any trial") from None
        raise ExperimentError(f"arm '{arm.name}': postgres refused its settings: {said}",
                              hint="the server is given the arm's app settings over the "
                              "workload's and your conf's: one of them is not its own"
                              ) from None
    return own
