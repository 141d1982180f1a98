"""Experiment files: validation with line numbers, round trip, seeded schedule."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from hugelab.errors import ExperimentError
from hugelab.experiment import Experiment, default_experiment, load_experiment, schedule

GOOD = """\
name = "thp-vs-1g"
seed = 7
blocks = 5
baseline = "thp"

[workload]
kind = "hugelab-mem"
workload = "chase"
size = "256M"

[[arms]]
name = "thp"
backing = "thp"
thp = "always"

[[arms]]
name = "1g"
backing = "hugetlb-1G"
pools = { "1G" = 1 }
"""


def write(tmp_path, text):
    p = tmp_path / "exp.toml"
    p.write_text(text)
    return p


def test_good_file_parses(tmp_path):
    exp = load_experiment(write(tmp_path, GOOD))
    assert [a.name for a in exp.arms] == ["thp", "1g"]
    assert exp.arms[0].thp == "always" and exp.arms[1].pools[0].pages == 1
    assert exp.baseline_arm == "thp" and exp.blocks == 5


def test_round_trips_through_json():
    for exp in (default_experiment(),):
        again = Experiment.from_dict(json.loads(json.dumps(exp.to_dict())))
        assert again == exp and again.key() == exp.key()


@pytest.mark.parametrize("old,new,line,words", [
    ('backing = "hugetlb-1G"', 'backing = "hugetlb-3G"', 18, "backing"),
    ('thp = "always"', 'thp = "sometimes"', 14, "thp"),
    ('thp = "always"', 'thp = "always"\nbakcing = "x"', 15, "unknown key 'bakcing'"),
    ('blocks = 5', 'blocks = 0', 3, "blocks must be"),
    ('baseline = "thp"', 'baseline = "4k"', 4, "baseline '4k'"),
    ('pools = { "1G" = 1 }', 'pools = { "3G" = 1 }', 19, "bad pool"),
])
def test_errors_name_the_line_and_key(tmp_path, old, new, line, words):
    with pytest.raises(ExperimentError) as exc:
        load_experiment(write(tmp_path, GOOD.replace(old, new)))
    assert f"line {line}:" in exc.value.message and words in exc.value.message


def test_malformed_toml(tmp_path):
    with pytest.raises(ExperimentError, match="not valid TOML.*line 2"):
        load_experiment(write(tmp_path, 'name = "x"\nblocks = = 3\n'))


def test_no_arms(tmp_path):
    with pytest.raises(ExperimentError, match="no arms"):
        load_experiment(write(tmp_path, 'name = "x"\n'))


def test_schedule_every_arm_once_per_block_in_varying_order():
    exp = default_experiment()
    s = schedule(exp)
    assert len(s) == exp.blocks * len(exp.arms)
    for b in range(exp.blocks):
        arms = [t.arm for t in s if t.block == b]
        assert sorted(arms) == sorted(a.name for a in exp.arms)
    orders = {tuple(t.arm for t in s if t.block == b) for b in range(exp.blocks)}
    assert len(orders) > 1  # randomized, not a fixed A-B-C-D rotation
    assert schedule(exp) == s  # same seed, same schedule
    other = Experiment(**{**exp.__dict__, "seed": exp.seed + 1})
    assert schedule(other) != s


def test_schedule_positions_are_balanced_over_many_blocks():
    exp = Experiment(**{**default_experiment().__dict__, "blocks": 4000})
    first = Counter(t.arm for t in schedule(exp) if t.position == 0)
    assert all(900 < c < 1100 for c in first.values())


VM = """\
name = "vm"
blocks = 2

[vm]
mem = "384M"
accel = "tcg"

[[arms]]
name = "native"
backing = "4k"

[[arms]]
name = "guest-2M"
backing = "hugetlb-2M"
[arms.vm]
backing = "file"
page_size = "2M"
prealloc = true
vms = 2
[arms.guest]
thp = "never"
pools = { "2M" = 64 }
"""


def test_vm_and_guest_layers(tmp_path):
    exp = load_experiment(write(tmp_path, VM))
    native, guest = exp.arms
    assert native.vm is None and native.targets() == ["native"]
    assert guest.vm.backing == "file" and guest.vm.page_size == "2M" and guest.vm.prealloc
    assert guest.vm.mem_mib == 384 and guest.vm.accel == "tcg" and guest.vm.vms == 2
    assert guest.guest.thp == "never" and guest.guest.pools_2m == 64
    assert guest.targets() == ["vm0", "vm1"]
    assert Experiment.from_dict(json.loads(json.dumps(exp.to_dict()))) == exp


@pytest.mark.parametrize("old,new,line,words", [
    ('page_size = "2M"\nprealloc', 'prealloc', 16, "needs page_size"),
    ('vms = 2', 'vms = 0', 19, "vms must be a positive"),
    ('thp = "never"', 'thp = "sometimes"', 21, "guest thp"),
    ('prealloc = true', 'prealloc = true\nhuge = 1', 19, "unknown key 'huge'"),
])
def test_vm_layer_errors(tmp_path, old, new, line, words):
    with pytest.raises(ExperimentError) as exc:
        load_experiment(write(tmp_path, VM.replace(old, new)))
    assert f"line {line}:" in exc.value.message and words in exc.value.message


def test_workload_paths_written_dot_slash_are_beside_the_file(tmp_path):
    from pathlib import Path

    from hugelab.experiment.parse import beside
    folder = Path("/srv/exp")
    data = {"workload": {"kind": "postgres", "dump": "./data/d.sql", "conf": "../c.conf",
                         "script": "/abs/q.sql", "builtin": "select-only", "scale": 2}}
    assert beside(data, folder)["workload"] == {
        "kind": "postgres", "dump": "/srv/exp/data/d.sql", "conf": "/srv/c.conf",
        "script": "/abs/q.sql", "builtin": "select-only", "scale": 2}
    assert beside({"arms": []}, folder) == {"arms": []}
    f = tmp_path / "e.toml"
    f.write_text('[workload]\nkind = "command"\nargv = ["./x"]\nbinary_dir = "./bin"\n'
                 '[[arms]]\nname = "a"\nbacking = "4k"\n')
    assert load_experiment(f).workload["binary_dir"] == str(tmp_path / "bin")


def test_a_misspelt_arm_key_names_the_arm_and_the_key_it_meant(tmp_path):
    with pytest.raises(ExperimentError) as exc:
        load_experiment(write(tmp_path, GOOD.replace('thp = "always"',
                                                     'thp = "always"\nbakcing = "x"')))
    assert "unknown key 'bakcing' in arm #1 'thp'" in exc.value.message
    assert exc.value.hint.startswith("did you mean 'backing'? known keys: ")
