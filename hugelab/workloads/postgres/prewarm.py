"""A fresh server's shared buffers filled with the database's own relations before any load
(`prewarm = true`, the default): the contrib extension pg_prewarm reads every table, index,
materialized view and TOAST table of the `postgres` database (the catalogs aside) into shared
buffers, up to their size. A trial then measures the warm server a DBA runs, not its first
seconds of reads from the page cache and first touches of shared memory, whose share of a
trial depends on its length. Measured on examples/postgres-interleaved.toml: cold 8 s trials
read +5.6% for huge_pages on, warm ones +2.9% (docs/benchmarks.md). The trial's info records
the blocks read (`prewarmed_blocks`)."""

from __future__ import annotations

from pathlib import Path

from hugelab import proc
from hugelab.errors import WorkloadError

SQL = ("CREATE EXTENSION IF NOT EXISTS pg_prewarm; "
       "SELECT coalesce(sum(pg_prewarm(c.oid)), 0) FROM pg_class c "
       "JOIN pg_namespace n ON n.oid = c.relnamespace "
       "WHERE c.relkind IN ('r', 'i', 'm', 't') AND c.relpersistence = 'p' "
       "AND n.nspname NOT IN ('pg_catalog', 'information_schema')")
HINT = ("pg_prewarm is a contrib extension, in Debian's postgresql-NN package; "
        "prewarm = false in [workload] runs without it (cold buffers)")


def argv(psql: Path | str, socket_dir: Path | str, port: int, user: str) -> list[str]:
    """psql running SQL against the server's private socket (pure)."""
    return [str(psql), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", str(socket_dir),
            "-p", str(port), "-U", user, "-d", "postgres", "-c", SQL]


def blocks_read(stdout: str, stderr: str = "") -> int:
    """The blocks pg_prewarm read, from psql's output (pure); WorkloadError without them."""
    lines = [x.strip() for x in stdout.splitlines() if x.strip()]
    if not lines or not lines[-1].isdigit():
        raise WorkloadError("postgres: pg_prewarm did not say how many blocks it read:\n  "
                            + (stderr or stdout or "(no output)").strip(), hint=HINT)
    return int(lines[-1])


def fill(psql: Path, socket_dir: Path, port: int, user: str, timeout: float) -> int:
    """Prewarm the running server on `socket_dir` (as root, over its private socket): the
    blocks read; WorkloadError with psql's words when it failed."""
    cp = proc.run(argv(psql, socket_dir, port, user), check=False, timeout=timeout)
    if cp.returncode != 0:
        raise WorkloadError("postgres: pg_prewarm failed:\n  " + cp.stderr.strip(), hint=HINT)
    return blocks_read(cp.stdout, cp.stderr)
