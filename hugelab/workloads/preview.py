"""The dry run's promise to the kinds: while `previewing()`, building an experiment's workloads
changes nothing (`hugelab run --dry-run` builds them to validate the file and size the run).

A kind that builds something once and caches it (PostgreSQL's template cluster: initdb and
`pgbench -i`, or a user's whole dump restored) builds nothing while `active()`: it reads what
it can (a dump's size and format, a data directory's version), checks what it can against a
template already cached, and says what the run will build, how large and how long, through its
workload's `builds()` hook (a list of `Build`), which `run --dry-run` shows."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

_ACTIVE: ContextVar[bool] = ContextVar("hugelab_preview", default=False)

# Bytes a build writes per unit of its amount (measured here, docs/benchmarks.md): pgbench -i a
# scale unit; a dump restored, per byte of the dump (a custom-format dump is compressed); a
# sysbench row. The cost model sizes builds with them, the fill model a restored cluster.
BYTES_PER_UNIT = {"pgbench_init": 16e6, "restore_plain": 1.5, "restore_tar": 1.5,
                  "restore_custom": 4.0, "sysbench_prepare": 295.0}  # a row: 295 B


@dataclass(frozen=True)
class Build:
    """What a run will build before its first trial (the dry run built none of it): its
    recipe and amount, which the cost model (hugelab.planning.cost.build_cost) turns into
    bytes and seconds."""

    what: str              # "PostgreSQL 15.14 template: initdb + pgbench -i -s 10"
    recipe: str            # "pgbench_init" (amount: scale), "restore_plain" / "restore_custom"
    amount: float          # / "restore_tar" (amount: the dump's bytes)
    cached: bool | None    # already in the cache (the run reuses it); None: not known
    note: str = ""         # what the dry run could not check


@dataclass(frozen=True)
class GuestBuild:
    """What every trial in a user's domain builds in the guest before its load (a kind's
    `guest_build`; the dry run builds none of it): the data it loads (a Build's recipe and
    amount, which the cost model sizes), the rest in seconds per accelerator (an initdb, a
    server started and stopped), whether it reads the data again (a prewarm), and an untimed
    warmup's seconds; with `layer_s`, the data is built once per run instead."""

    what: str                    # "PostgreSQL: initdb, pgbench -i -s 1, pg_prewarm"
    recipe: str
    amount: float
    fixed_s: Mapping[str, float]  # "kvm" / "tcg" -> seconds
    reread: bool = False
    warmup_s: float = 0.0
    # a kind whose data is built once in the domain's layer (hugelab.vm.domains.layer): the
    # layer's seconds beyond its data and boot (initdb, a server started and stopped, the
    # power-off), once per run where not cached; its trials then count fixed_s, the reread
    # and the warmup only
    layer_s: Mapping[str, float] | None = None
    layer_what: str = ""


def active() -> bool:
    """True while a dry run builds the experiment's workloads."""
    return _ACTIVE.get()


@contextmanager
def previewing() -> Iterator[None]:
    token = _ACTIVE.set(True)
    try:
        yield
    finally:
        _ACTIVE.reset(token)
