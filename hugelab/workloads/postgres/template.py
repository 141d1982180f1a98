"""The template cluster: initdb and `pgbench -i -s <scale>` once per PostgreSQL version and
scale, kept in the cache (cluster.cache_dir()/<key>) and copied for each trial; built under a
lock, so two runs that need it at once build it once."""

from __future__ import annotations

import fcntl
import os
import shutil
from pathlib import Path

from hugelab.errors import WorkloadError
from hugelab.proc import run
from hugelab.workloads.postgres import cluster, server

BUILD_SETTINGS: dict[str, object] = {"huge_pages": "off", "fsync": "off"}  # never `try`


def ensure(bin_dir: Path, scale: int) -> Path:
    """The cached template's data directory for this PostgreSQL and scale, built if missing."""
    key = cluster.template_key(cluster.version(bin_dir), scale)
    cache = cluster.cache_dir()
    path = cache / key
    fd = os.open(cache / f"{key}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        if not (path / "PG_VERSION").is_file():
            _build(bin_dir, scale, path)
    finally:
        os.close(fd)
    return path


def _build(bin_dir: Path, scale: int, dest: Path) -> None:
    with cluster.private_dir("template") as cd:
        cluster.as_postgres([bin_dir / "initdb", "-D", cd.data, "-E", "UTF8", "--locale=C",
                             "--auth=trust", "--no-sync", "-U", cluster.USER])
        srv = server.start(bin_dir, cd, BUILD_SETTINGS)
        try:
            cp = run([bin_dir / "pgbench", "-i", "-q", "-s", str(scale), "-h", str(cd.top),
                      "-p", str(server.PORT), "-U", cluster.USER, "postgres"],
                     check=False, timeout=3600)
        finally:
            out = srv.stop()
        if cp.returncode != 0:
            raise WorkloadError(f"pgbench -i -s {scale} failed ({cp.returncode}):\n  "
                                + (cp.stderr or out).strip().replace("\n", "\n  "))
        (cd.data / "postmaster.pid").unlink(missing_ok=True)
        tmp = dest.with_name(dest.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        run(["cp", "-a", "--", str(cd.data), str(tmp)])
        os.rename(tmp, dest)
