"""What a MariaDB trial in a user's domain builds in the guest before its load, for the cost
model (`run --dry-run`): once per run, the domain's layer (indomain.layer, hugelab.vm.domains.
layer: a boot, a datadir made with the guest's mariadb-install-db, mariadbd started as a
transient systemd service, the tables made with the guest's sysbench `prepare` or the user's SQL
dump loaded with the guest's client, a slow shutdown, a power-off); then every trial moves the
datadir in, starts the server, runs the warmup, then the load; the server stopped and every
guest change undone after (indomain.py). examples/mariadb-domain.toml on the demo domain
(Debian 12, 512 MiB, TCG; one table of 2,000 rows, 1 s of warmup, 5 s of load), 2026-11-30:
the layer 38 s, its boot included; a trial over it 32 s, 17.5 s of it the boot (before the
layer: 15 s a trial beyond the boot, the warmup, the load and the runner's half second; now
about 8). KVM's figure is not measured (no KVM here): PostgreSQL's TCG-to-KVM ratio is assumed.
A table's rows are sized at 295 bytes each (sbtest1.ibd of the 2,000-row template in
/var/cache/hugelab/mariadb: 589,824 bytes); a dump as a plain SQL restore of its size."""

from __future__ import annotations

import os

from hugelab.workloads.preview import GuestBuild

FIXED_S = {"kvm": 2.0, "tcg": 8.0}  # a trial: the datadir moved in, the service started and
# stopped, the undo
LAYER_S = {"kvm": 6.0, "tcg": 20.0}  # the layer: install-db, the service started and stopped,
# the power-off (its boot and its tables are counted apart)


def guest_build(tables: int, rows: int, dump: str | None, warmup_s: float) -> GuestBuild:
    """The build of a trial in a user's domain: `tables` x `rows` made by sysbench prepare, or
    `dump` loaded; the warmup counted where the trial runs one (a second or more)."""
    warmup = warmup_s if warmup_s >= 1 else 0.0
    warm = ", the warmup" if warmup else ""
    if dump:
        try:
            size = float(os.path.getsize(dump))
        except OSError:
            size = 0.0  # the run says what is wrong with it
        return GuestBuild(f"MariaDB: the layer's datadir moved in{warm}", "restore_plain",
                          size, FIXED_S, warmup_s=warmup, layer_s=LAYER_S,
                          layer_what=f"MariaDB: mariadb-install-db, {dump} loaded")
    return GuestBuild(f"MariaDB: the layer's datadir moved in{warm}", "sysbench_prepare",
                      float(tables * rows), FIXED_S, warmup_s=warmup, layer_s=LAYER_S,
                      layer_what=f"MariaDB: mariadb-install-db, sysbench prepare ({tables} x "
                                 f"{rows:,} rows)")
