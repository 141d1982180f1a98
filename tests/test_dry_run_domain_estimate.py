"""`run --dry-run`'s duration for PostgreSQL in a user's domain counts what the run builds in the
guest: the domain's layer once (a boot, initdb, pgbench -i or the dump restored), then in every
trial the cluster moved in, pg_prewarm and the warmup, and a whole distribution's boot. Issue
40: examples/postgres-domain-2x2.toml estimated 1 min 32 s for --blocks 2, where the real run
under TCG took 296 s for 8 trials (148 s at --blocks 1), when every trial built its own
cluster; with the layer (2026-11-30), 162 s at --blocks 1 with the layer built, 119 s over it
cached."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from hugelab.experiment import load_experiment
from hugelab.planning.cost import estimate, in_guest_build_s, layer_build_s
from hugelab.planning.dryrun import guest_builds

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "postgres-domain-2x2.toml"
REAL_S = {1: 162.0}  # blocks -> seconds of the real run under TCG (demo domain), layer built


def test_postgres_in_a_domain_is_estimated_within_30_percent_of_a_real_run():
    exp = load_experiment(EXAMPLE)
    for blocks, real in REAL_S.items():
        est = estimate(replace(exp, blocks=blocks), accel="tcg")
        assert abs(est.seconds - real) <= 0.3 * real, (blocks, est.seconds, real)
    assert est.boot_basis == "assumed (tcg, a user's domain)"


def test_the_in_guest_build_grows_with_the_scale_and_the_dump(tmp_path):
    base = {"kind": "postgres", "scale": 1, "warmup_s": 0}
    small, big = in_guest_build_s(base), in_guest_build_s({**base, "scale": 100})
    assert 5 < small < big  # 100 x 16 MB prewarmed in a TCG guest (loaded once, in the layer)
    assert layer_build_s(base) < layer_build_s({**base, "scale": 100})
    assert layer_build_s({**base, "scale": 100}) - layer_build_s(base) > \
        5 * (big - small)  # loading is the layer's, once; the trials only read it again
    assert in_guest_build_s({**base, "scale": 100}, "kvm") < big
    assert in_guest_build_s({**base, "warmup_s": 5}) == small + 5
    dump = tmp_path / "shop.dump"
    dump.write_bytes(b"PGDMP" + b"\0" * 50_000_000)  # custom format: grows about 4x restored
    assert layer_build_s({**base, "dump": str(dump)}) > layer_build_s(
        {**base, "dump": str(tmp_path / "plain.sql")})  # unreadable: the run says why
    assert in_guest_build_s({"kind": "varnish"}) == 0.0  # its trial builds nothing there


def test_a_native_postgres_arm_builds_nothing_per_trial():
    exp = load_experiment(EXAMPLE)
    native = replace(exp, arms=tuple(replace(a, vm=None) for a in exp.arms))
    per_trial = estimate(native).per_arm
    assert all(s is not None and s < 5 for s in per_trial.values()), per_trial


def test_the_dry_run_says_what_every_trial_builds_in_the_guest():
    exp = load_experiment(EXAMPLE)
    said = guest_builds(list(exp.arms), exp, "tcg")
    assert [g["what"] for g in said] == ["PostgreSQL: the layer's cluster moved in, pg_prewarm"]
    assert 5 < said[0]["seconds"] < 15
    assert said[0]["layer"]["what"] == "PostgreSQL: initdb, pgbench -i -s 1"
    assert said[0]["layer"]["domain"] == "hugelab-demo-debian" and said[0]["layer"]["seconds"] > 15
    assert guest_builds([replace(a, vm=None) for a in exp.arms], exp, "tcg") == []
