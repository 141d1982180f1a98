"""The dry run's pieces that need no program (issue 40 items 1 and 2): a domain arm when
libvirtd is not reachable, every kind's non-zero duration, the build cost model, Redis's
default data set, and a kind that builds nothing while previewing."""

from __future__ import annotations

from pathlib import Path

import pytest

from hugelab.experiment import load_experiment
from hugelab.planning import domains
from hugelab.planning.cost import build_cost, workload_seconds
from hugelab.vm.common.libvirtd import DomainError
from hugelab.workloads import preview
from hugelab.workloads.redis import RedisBenchmark
from hugelab.workloads.registry import kinds

DOMAIN_EXAMPLE = Path(__file__).resolve().parents[1] / "examples/postgres-domain-2x2.toml"
NO_LENGTH = {"command", "build"}  # a user's program or build: only its timeout_s says


def test_unreachable_libvirtd_is_said_with_what_was_not_checked(monkeypatch):
    def down(uri):
        raise DomainError(f"cannot connect to libvirt at {uri}: Failed to connect socket",
                          hint="is libvirtd running? start it: `virtlogd -d; libvirtd -d`")
    monkeypatch.setattr(domains, "connect", down)
    exp = load_experiment(DOMAIN_EXAMPLE)
    out, notes = domains.resolve_or_note(exp)
    assert out.arms == exp.arms  # the rest of the plan still has every arm
    assert len(notes) == 1
    assert "cannot connect to libvirt at qemu:///system" in notes[0]
    assert "(is libvirtd running? start it: `virtlogd -d; libvirtd -d`)" in notes[0]  # how
    assert "could not check, for the domain arms (" in notes[0]
    assert "that the domain exists" in notes[0] and "its memory and vCPUs" in notes[0]
    assert all(a.name in notes[0] for a in exp.arms if a.vm and a.vm.domain)


@pytest.mark.parametrize("name", sorted(set(kinds()) - NO_LENGTH))
def test_every_kind_has_a_nonzero_duration_estimate(name):
    assert (workload_seconds({"kind": name}) or 0) > 0


def test_redis_estimate_counts_its_requests_and_preload():
    small = workload_seconds({"kind": "redis", "requests": 1000, "keyspace": 10, "tests": ["get"]})
    big = workload_seconds({"kind": "redis", "requests": 1_000_000, "tests": ["get"]})
    assert 0 < small < 1 < big
    assert workload_seconds({"kind": "redis", "timeout_s": 7}) == 7


def test_build_cost_grows_with_the_scale_and_the_dump():
    (s5, t5), (s50, t50) = build_cost("pgbench_init", 5), build_cost("pgbench_init", 50)
    assert 0 < s5 < s50 and 0 < t5 < t50
    plain, custom = build_cost("restore_plain", 1e9), build_cost("restore_custom", 1e9)
    assert plain[0] < custom[0]  # a custom dump is compressed: it restores larger
    assert build_cost("no such recipe", 1) == (None, None)


def test_redis_defaults_hold_a_data_set_huge_pages_can_matter_for(tmp_path):
    w = RedisBenchmark()
    assert w.preloads and (w.keyspace or 0) * w.data_size >= 100_000_000
    argv = w.benchmark_argv(6379)
    assert argv[argv.index("-r") + 1] == "1000000" and argv[argv.index("-d") + 1] == "100"
    rdb = tmp_path / "dump.rdb"
    rdb.write_bytes(b"REDIS0011" + bytes(16))
    assert not RedisBenchmark(rdb=str(rdb)).preloads  # a user's data set is not padded


def test_previewing_is_scoped():
    assert not preview.active()
    with preview.previewing():
        assert preview.active()
    assert not preview.active()
