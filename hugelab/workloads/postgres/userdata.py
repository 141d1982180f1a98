"""A user's own data as a trial's starting point: a `pg_dump` file, restored once into a cached
template (keyed by the dump's sha256 and the server's version), or a data directory of the same
major version, copied for each trial and never opened in place.

A dump's format is read from its content: custom (`PGDMP` first) and tar (`ustar` at byte 257)
go to pg_restore, plain SQL text to psql. Both restore into the `postgres` database, which
pgbench then loads, without owners or grants (the user's roles need not exist here). A
builtin pgbench script needs pgbench's own tables: refused before any trial when the dump, or
the data directory's catalogue, does not name them."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from hugelab.errors import ExperimentError, WorkloadError
from hugelab.owned import file_sha256
from hugelab.proc import run
from hugelab.workloads.postgres import cluster, userconf

CHUNK = 1 << 20
SNIFF = 4096
BULK = ("base", "pg_wal", "pg_tblspc")  # a data directory's data, which `postgres -C` never reads
HBA = "# written by hugelab: the private copy's own socket, trust behind its 0700 directory\n" \
      "local all all trust\n"
PGBENCH_TABLES = {"select-only": ("pgbench_accounts",),
                  "tpcb-like": ("pgbench_accounts", "pgbench_branches", "pgbench_tellers",
                                "pgbench_history"),
                  "simple-update": ("pgbench_accounts", "pgbench_branches", "pgbench_history")}


def dump_format(head: bytes) -> str:
    """'custom', 'tar' or 'plain' from a dump's first bytes (pure); ValueError otherwise."""
    if head.startswith(b"PGDMP"):
        return "custom"
    if head[257:262] == b"ustar":
        return "tar"
    if head.startswith(b"\x1f\x8b"):
        raise ValueError("a gzip file: give the plain SQL (gunzip it), or a custom-format "
                         "dump (pg_dump -Fc)")
    if b"\0" in head:
        raise ValueError("not a pg_dump file (binary, and neither custom nor tar format)")
    return "plain"


def dump_recipe(path: str) -> tuple[str, float]:
    """A dump's restore recipe and bytes; a dump that cannot be read counts as an empty plain
    one (the run says what is wrong)."""
    try:
        with open(path, "rb") as f:
            fmt = dump_format(f.read(SNIFF))
        return f"restore_{fmt}", float(os.path.getsize(path))
    except (OSError, ValueError):
        return "restore_plain", 0.0


def sha256(path: Path) -> str:
    return file_sha256(path)


def check_dump(path: str) -> str:
    """The dump's format; ExperimentError when it is no file or no dump."""
    try:
        with open(path, "rb") as f:
            head = f.read(SNIFF)
    except OSError as exc:
        raise ExperimentError(f"postgres: dump {path!r} cannot be read: {exc.strerror}") from None
    try:
        return dump_format(head)
    except ValueError as exc:
        raise ExperimentError(f"postgres: dump {path}: {exc}") from None


def restore_argv(bin_dir: Path, fmt: str, dump: Path, socket_dir: Path, port: int,
                 database: str = "postgres") -> list[str]:
    """psql (plain SQL, stopping at the first error) or pg_restore (no owners, grants or
    tablespaces) into `database` over the private socket (pure)."""
    conn = ["-h", str(socket_dir), "-p", str(port), "-U", cluster.USER]
    if fmt == "plain":
        return [str(bin_dir / "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", *conn,
                "-d", database, "-f", str(dump)]
    return [str(bin_dir / "pg_restore"), "--no-owner", "--no-privileges", "--no-tablespaces",
            "--exit-on-error", *conn, "-d", database, str(dump)]


def dump_key(pg_version: str, digest: str, fmt: str) -> str:
    """The cached template's name for a dump: its content and the server's version (pure)."""
    recipe = f"dump:{cluster.TEMPLATE_FORMAT}:{pg_version}:{fmt}:{digest}"
    return "dump-" + hashlib.sha256(recipe.encode()).hexdigest()[:20]


def names_in_file(path: Path, names: tuple[str, ...]) -> set[str]:
    """Which of `names` occur in the file's bytes (read in chunks, overlapping)."""
    want = {n: n.encode() for n in names}
    found: set[str] = set()
    tail = b""
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            text = tail + block
            found |= {n for n, b in want.items() if b in text}
            tail = text[-64:]
    return found


def catalog_files(datadir: Path) -> list[Path]:
    """pg_class's heap of every database (relfilenode 1259 unless rewritten), where a table's
    name is stored as plain bytes."""
    return sorted(p for p in datadir.glob("base/*/1259*") if p.is_file())


def check_builtin(builtin: str, dump: str | None, datadir: str | None) -> None:
    """ExperimentError when a builtin script meets user data without pgbench's tables."""
    need = PGBENCH_TABLES.get(builtin, ())
    files = [Path(dump)] if dump else catalog_files(Path(datadir or "."))
    found: set[str] = set()
    for f in files:
        found |= names_in_file(f, need)
    if missing := [n for n in need if n not in found]:
        raise ExperimentError(
            f"postgres: builtin {builtin!r} needs pgbench's tables, and the "
            f"{'dump' if dump else 'data directory'} has no {missing[0]}",
            hint="give your own load with script = \"/path/to/file.sql\" (pgbench -f)")


def check_datadir(path: str) -> str:
    """The data directory's major version (PG_VERSION); ExperimentError when it is none, or
    its server may be running (a copy of a live cluster is not consistent)."""
    d = Path(path)
    try:
        major = (d / "PG_VERSION").read_text().strip()
    except OSError:
        raise ExperimentError(f"postgres: datadir {path!r} is not a PostgreSQL data directory "
                              "(no PG_VERSION)") from None
    if (d / "postmaster.pid").exists():
        raise ExperimentError(f"postgres: datadir {path} has a postmaster.pid: its server "
                              "may be running, and a copy of a live cluster is not consistent",
                              hint="stop its server (or remove a stale postmaster.pid), or "
                                   "give a pg_dump file as dump")
    return major


def check_major(datadir: str, pg_version: str) -> None:
    major, ours = check_datadir(datadir), pg_version.split(".")[0]
    if major != ours:
        raise ExperimentError(f"postgres: datadir {datadir} is PostgreSQL {major}, this server "
                              f"is {pg_version}",
                              hint=f"bindir = \"/usr/lib/postgresql/{major}/bin\", or a "
                                   "pg_dump of it as dump")


def copy_datadir(src: Path, cd: cluster.ClusterDir, settings_only: bool = False) -> None:
    """The user's data directory into `cd` (reading it only), its symbolic links followed (a
    pg_wal or tablespace elsewhere is copied too, never shared with the original), then made
    the copy's own: owned by postgres, 0700, its authentication hugelab's (trust on the private
    socket), the files a Debian-style directory keeps elsewhere present, no stale pid file.
    `settings_only`: without the data itself (BULK left empty), enough for `postgres -C`."""
    if settings_only:
        cd.data.mkdir(mode=0o700)
        small = [str(p) for p in sorted(src.iterdir()) if p.name not in BULK]
        run(["cp", "-a", "-L", "--", *small, str(cd.data)])
        for name in BULK:
            (cd.data / name).mkdir()
    else:
        run(["cp", "-a", "-L", "--", str(src), str(cd.data)])
    uid, gid = cluster.user_ids()
    run(["chown", "-R", f"{uid}:{gid}", "--", str(cd.data)])
    os.chmod(cd.data, 0o700)
    (cd.data / "pg_hba.conf").write_text(HBA)
    for name in ("postgresql.conf", "pg_ident.conf"):
        if not (cd.data / name).exists():
            (cd.data / name).write_text("")
    for name in ("pg_hba.conf", "postgresql.conf", "pg_ident.conf"):
        os.chown(cd.data / name, uid, gid)
    (cd.data / "postmaster.pid").unlink(missing_ok=True)


def copy(w: Any, source: Path, cd: cluster.ClusterDir, settings_only: bool = False) -> None:
    """A trial's (or a `postgres -C` question's) cluster for Postgres workload `w` from
    `source`: the user's data directory (for a question only its settings), or a template."""
    if w.datadir:
        copy_datadir(source, cd, settings_only)
    else:
        cluster.copy_template(source, cd)


def trial_dir(w: Any, source: Path) -> Path:
    """A trial's private cluster for Postgres workload `w`: `source` (the template, or the
    user's data directory) copied into a new one; its top."""
    cd = cluster.new_dir("trial")
    try:
        copy(w, source, cd)
    except BaseException:
        cluster.remove_dir(cd)
        raise
    return cd.top


def analyze_argv(bin_dir: Path, socket_dir: Path, port: int) -> list[str]:
    """ANALYZE after a restore (pg_restore and psql leave the planner without statistics)."""
    return [str(bin_dir / "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", str(socket_dir),
            "-p", str(port), "-U", cluster.USER, "-d", "postgres", "-c", "ANALYZE"]


def restore_steps(bin_dir: Path, fmt: str, dump: Path, socket_dir: Path, port: int
                  ) -> list[list[str]]:
    """Every command that restores a dump into a fresh cluster, in order, on the host and in a
    user's domain alike: the restore (`restore_argv`), then ANALYZE (pure)."""
    return [restore_argv(bin_dir, fmt, dump, socket_dir, port),
            analyze_argv(bin_dir, socket_dir, port)]


def restore_failed(argv: list[str], code: int, output: str) -> WorkloadError:
    return WorkloadError(f"restoring the dump failed ({code}): {Path(argv[0]).name}\n  "
                         + output.strip().replace("\n", "\n  ")[-2000:],
                         hint="a plain dump stops at its first error: make it with pg_dump "
                              "--no-owner --no-privileges --no-tablespaces, or as custom "
                              "format (-Fc)")


def check_user_data(w: Any) -> None:
    """A Postgres workload's dump / datadir / conf, checked (paths made absolute) and the
    conf's settings read into `w.conf_items`, before any trial; ExperimentError otherwise.
    The one check for every arm: a user's domain (`w.domain_arm`) takes a dump (plain SQL,
    custom or tar format) and a script, not a data directory of this host (its server version
    is the host's, not the guest's)."""
    if w.dump and w.datadir:
        raise ExperimentError("postgres: give dump or datadir, not both")
    if w.datadir and w.domain_arm:
        raise ExperimentError("postgres: datadir is a data directory of this host; a domain "
                              "runs the guest's own PostgreSQL",
                              hint="give a dump (pg_dump, plain or -Fc) as dump = ...; it is "
                                   "restored in the guest per trial")
    for key in ("dump", "datadir", "conf"):
        if getattr(w, key):
            object.__setattr__(w, key, os.path.abspath(getattr(w, key)))
    if w.dump:
        check_dump(w.dump)
    if w.datadir:
        check_datadir(w.datadir)
    if (w.dump or w.datadir) and w.script is None:
        check_builtin(w.builtin, w.dump, w.datadir)
    if w.conf:
        object.__setattr__(w, "conf_items", tuple(userconf.read(w.conf)))


def warnings(w: Any, used: dict[str, object]) -> list[str]:
    """The owned settings that the user's conf, or their data directory's own
    postgresql.conf, set: the arm's value wins (see userconf)."""
    out = userconf.warnings(list(w.conf_items), used, w.conf) if w.conf else []
    own = Path(w.datadir or "") / "postgresql.conf"
    if w.datadir and own.is_file():
        try:
            out += userconf.warnings(userconf.parse(own.read_text(errors="replace"), str(own)),
                                     used, str(own))
        except ExperimentError as exc:
            out.append(f"{own} was not read for settings hugelab owns: {exc.message}")
    return out


def info(w: Any) -> dict[str, Any]:
    """Where a trial's data and settings came from, for its result's info."""
    out = {k: getattr(w, k) for k in ("dump", "datadir", "conf") if getattr(w, k)}
    return {"user_data": out} if out else {}
