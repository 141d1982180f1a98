"""What a MariaDB trial in a user's domain builds in the guest before its load, for the cost
model (`run --dry-run`): every trial makes a datadir there with the guest's mariadb-install-db,
starts mariadbd as a transient systemd service, makes the tables with the guest's sysbench
`prepare` (or loads the user's SQL dump with the guest's client), runs the warmup, then the load;
the server stopped and every guest change undone after (indomain.py).
examples/mariadb-domain.toml on the demo domain (Debian 12, 512 MiB, TCG; one table of 2,000
rows, 1 s of warmup, 5 s of load) took 73 s for two trials on a quiet host, 14-15 s of each
the boot: about 15 s a trial beyond the boot, the warmup, the load and the runner's half
second. KVM's figure is not measured (no KVM here): PostgreSQL's TCG-to-KVM ratio is assumed.
A table's rows are sized at 295 bytes each (sbtest1.ibd of the 2,000-row template in
/var/cache/hugelab/mariadb: 589,824 bytes); a dump as a plain SQL restore of its size."""

from __future__ import annotations

import os

from hugelab.workloads.preview import GuestBuild

FIXED_S = {"kvm": 4.0, "tcg": 15.0}  # install-db, the service started and stopped, the undo


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
        return GuestBuild(f"MariaDB: mariadb-install-db, {dump} loaded{warm}", "restore_plain",
                          size, FIXED_S, warmup_s=warmup)
    return GuestBuild(f"MariaDB: mariadb-install-db, sysbench prepare ({tables} x {rows:,} "
                      f"rows){warm}", "sysbench_prepare", float(tables * rows), FIXED_S,
                      warmup_s=warmup)
