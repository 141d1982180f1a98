"""`run --dry-run` for MariaDB in a user's domain counts what every trial builds in the guest
(mariadb-install-db, sysbench prepare or the dump loaded, the warmup). Issue 40: before, the
kind declared no build and examples/mariadb-domain.toml estimated 1 min 26 s for --blocks 2
(21.5 s a trial), where a real trial under TCG took about 36.5 s (73 s for --blocks 1 on a
quiet host, docs/benchmarks.md). Since the domain's layer (2026-11-30), the datadir and tables
are made once per run: 111 s for --blocks 1 with the layer built (38 s of it), 66 s over it
cached, 32 s a trial."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from hugelab.experiment import load_experiment
from hugelab.planning.cost import estimate, in_guest_build_s, layer_build_s
from hugelab.workloads.registry import kinds

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "mariadb-domain.toml"
REAL_S = 111.0  # --blocks 1, two trials and the layer, the demo domain under TCG


def test_mariadb_in_a_domain_is_estimated_within_20_percent_of_a_real_run():
    est = estimate(replace(load_experiment(EXAMPLE), blocks=1), accel="tcg")
    assert abs(est.seconds - REAL_S) <= 0.2 * REAL_S, est.seconds


def test_the_build_grows_with_the_rows_and_the_dump(tmp_path):
    base = {"kind": "mariadb", "tables": 1, "table_size": 2000, "warmup_s": 0}
    small = in_guest_build_s(base)
    assert 5 < small == in_guest_build_s({**base, "table_size": 2_000_000})  # the layer's
    layer = layer_build_s(base)
    assert 15 < layer < layer_build_s({**base, "table_size": 2_000_000})
    assert in_guest_build_s(base, "kvm") < small and layer_build_s(base, "kvm") < layer
    assert in_guest_build_s({**base, "warmup_s": 3}) == small + 3
    dump = tmp_path / "shop.sql"
    dump.write_bytes(b"-- MariaDB dump\n" + b"x" * 50_000_000)
    assert layer_build_s({**base, "dump": str(dump)}) > layer


def test_every_server_kind_in_a_domain_declares_its_build():
    missing = [n for n, k in kinds().items()
               if k.role == "server" and k.runs("domain") and k.guest_build is None]
    assert not missing
