"""Factorial experiments: [factors]/[scenarios] expansion, validation, identity, cost, dry run."""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
from dataclasses import replace

import pytest

from hugelab.errors import ExperimentError
from hugelab.experiment import (
    Arm,
    Experiment,
    default_experiment,
    load_experiment,
    parse_experiment,
)
from hugelab.experiment.model import VmLayer
from hugelab.planning.budget import over_budget, parse_budget
from hugelab.planning.cost import Measured, cuts, estimate, human, workload_seconds
from hugelab.workloads.registry import build_for

MEM = {"kind": "hugelab-mem", "workload": "chase", "size": "16M", "duration": 0.2}


def write(tmp_path, text, name="exp.toml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def exp_of(**d):
    return parse_experiment({"workload": dict(MEM), **d})


def names(exp):
    return [a.name for a in exp.arms]


def cell(exp, name):
    return next(a for a in exp.arms if a.name == name)


# --- 1. expansion -----------------------------------------------------------------------------

NATIVE = """\
name = "native-factorial"
blocks = 2

[workload]
kind = "hugelab-mem"
workload = "chase"
size = "16M"
duration = 0.2

[factors]
thp = ["madvise", "always"]
backing = ["4k", "thp"]

[scenarios]
threads = [1, 2]
"""


def test_full_factorial_count_order_and_cell_names(tmp_path):
    exp = load_experiment(write(tmp_path, NATIVE))
    assert names(exp) == [
        "thp=madvise,backing=4k [threads=1]", "thp=madvise,backing=4k [threads=2]",
        "thp=madvise,backing=thp [threads=1]", "thp=madvise,backing=thp [threads=2]",
        "thp=always,backing=4k [threads=1]", "thp=always,backing=4k [threads=2]",
        "thp=always,backing=thp [threads=1]", "thp=always,backing=thp [threads=2]",
    ]
    c = cell(exp, "thp=always,backing=thp [threads=2]")
    assert (c.thp, c.backing, c.vm) == ("always", "thp", None)
    assert c.levels == (("thp", "always"), ("backing", "thp"), ("threads", "2"))
    assert c.workload == (("threads", 2),)
    assert [f.name for f in exp.factors] == ["thp", "backing", "threads"]
    assert [f.scenario for f in exp.factors] == [False, False, True]
    threads = exp.factors[2]
    assert threads.levels == ("1", "2") and threads.ordered and threads.positions == (1.0, 2.0)
    assert exp.baseline == "thp=madvise,backing=4k [threads=1]"
    assert exp.name == "native-factorial" and exp.blocks == 2


def test_three_factors_multiply():
    exp = exp_of(factors={"thp": ["never", "madvise", "always"], "backing": ["4k", "thp"],
                          "thp_defrag": ["defer", "never"]})
    assert len(exp.arms) == 12 and len(set(names(exp))) == 12
    assert names(exp)[0] == "thp=never,backing=4k,thp_defrag=defer"
    assert names(exp)[-1] == "thp=always,backing=thp,thp_defrag=never"


NAMED_AND_DOTTED = """\
[vm]
accel = "tcg"

[workload]
kind = "hugelab-mem"
size = "16M"

[factors]
vm.prealloc = [false, true]
guest.thp = ["never", "always"]

[factors.qemu]
anon = { vm = { backing = "anon" } }
hugetlbfs = { vm = { backing = "file", page_size = "2M" } }
"""


def test_named_levels_and_dotted_swept_settings(tmp_path):
    exp = load_experiment(write(tmp_path, NAMED_AND_DOTTED))
    assert [f.name for f in exp.factors] == ["vm.prealloc", "guest.thp", "qemu"]
    assert exp.factors[0].levels == ("false", "true")  # bool levels are named true/false
    assert len(exp.arms) == 8
    c = cell(exp, "vm.prealloc=true,guest.thp=always,qemu=hugetlbfs")
    assert c.vm.backing == "file" and c.vm.page_size == "2M" and c.vm.prealloc
    assert c.vm.accel == "tcg"  # [vm] defaults reach cells
    assert c.guest.thp == "always"
    b = cell(exp, "vm.prealloc=false,guest.thp=never,qemu=anon")
    assert b.vm.backing == "anon" and b.vm.page_size is None and not b.vm.prealloc
    assert b.guest.thp == "never"
    assert exp.baseline == b.name
    assert all(a.backing == "4k" and a.layer == "guest" for a in exp.arms)  # default backing


def test_base_reaches_every_cell_and_a_level_overrides_it():
    exp = exp_of(base={"thp": "always", "backing": "thp", "vm": {"mem": "1G", "accel": "tcg"}},
                 factors={"backing": ["4k", "thp"], "vm.prealloc": [False, True]})
    assert len(exp.arms) == 4
    assert all(a.thp == "always" and a.vm.mem_mib == 1024 and a.vm.accel == "tcg"
               for a in exp.arms)
    assert cell(exp, "backing=4k,vm.prealloc=true").backing == "4k"  # level beats [base]
    assert cell(exp, "backing=4k,vm.prealloc=true").vm.prealloc
    assert not cell(exp, "backing=thp,vm.prealloc=false").vm.prealloc


def test_default_backing_is_4k():
    exp = exp_of(factors={"thp": ["never", "always"]})
    assert [a.backing for a in exp.arms] == ["4k", "4k"]
    assert [a.thp for a in exp.arms] == ["never", "always"]


def test_cells_subset_keeps_only_matching_cells():
    exp = exp_of(factors={"thp": ["never", "always"], "backing": ["4k", "thp"]},
                 cells=[{"thp": "never"}, {"thp": "always", "backing": "thp"}])
    assert names(exp) == ["thp=never,backing=4k", "thp=never,backing=thp",
                          "thp=always,backing=thp"]
    assert exp.baseline == "thp=never,backing=4k"
    # the factors still list every level: the design, of which some cells run
    assert exp.factors[1].levels == ("4k", "thp")


def test_cells_accept_nested_and_numeric_levels():
    exp = exp_of(factors={"vm.prealloc": [False, True], "thp": ["never", "always"]},
                 scenarios={"threads": [1, 2]},
                 cells=[{"vm": {"prealloc": False}, "thp": "never"}, {"thp": "always"}])
    assert names(exp) == [
        "vm.prealloc=false,thp=never [threads=1]", "vm.prealloc=false,thp=never [threads=2]",
        "vm.prealloc=false,thp=always [threads=1]", "vm.prealloc=false,thp=always [threads=2]",
        "vm.prealloc=true,thp=always [threads=1]", "vm.prealloc=true,thp=always [threads=2]",
    ]


def test_baseline_table_reorders_levels_and_names_the_baseline_cell():
    exp = exp_of(factors={"thp": ["never", "always"], "backing": ["4k", "thp"]},
                 baseline={"backing": "thp"})
    assert exp.factors[0].levels == ("never", "always")
    assert exp.factors[1].levels == ("thp", "4k")
    assert names(exp) == ["thp=never,backing=thp", "thp=never,backing=4k",
                          "thp=always,backing=thp", "thp=always,backing=4k"]
    assert exp.baseline == "thp=never,backing=thp" == exp.baseline_arm


def test_baseline_with_dotted_or_nested_names():
    for bl in ({"vm.prealloc": True}, {"vm": {"prealloc": True}}):
        exp = exp_of(factors={"vm.prealloc": [False, True]}, baseline=bl)
        assert names(exp) == ["vm.prealloc=true", "vm.prealloc=false"]
        assert exp.baseline == "vm.prealloc=true"


def test_baseline_of_is_the_baseline_cell_of_the_own_scenario():
    exp = exp_of(factors={"thp": ["madvise", "always"], "backing": ["4k", "thp"]},
                 scenarios={"threads": [1, 2], "size": ["16M", "32M"]},
                 baseline={"thp": "always"})
    assert len(exp.arms) == 16
    for a in exp.arms:
        base = cell(exp, exp.baseline_of(a.name))
        lv, blv = dict(a.levels), dict(base.levels)
        assert (blv["thp"], blv["backing"]) == ("always", "4k")
        assert (blv["threads"], blv["size"]) == (lv["threads"], lv["size"])
    assert exp.baseline_of("thp=madvise,backing=thp [threads=2,size=32M]") == \
        "thp=always,backing=4k [threads=2,size=32M]"
    assert exp.baseline_of(exp.baseline) == exp.baseline == "thp=always,backing=4k [threads=1,size=16M]"


def test_workload_for_merges_scenario_values():
    exp = exp_of(factors={"thp": ["never", "always"]}, scenarios={"threads": [1, 4]})
    c = cell(exp, "thp=always [threads=4]")
    assert exp.workload_for(c) == {**MEM, "threads": 4}
    assert exp.workload == MEM  # the experiment's own table is untouched
    flat = default_experiment()
    assert flat.workload_for(flat.arms[0]) == flat.workload


def test_scenario_values_override_the_workload_table():
    exp = exp_of(factors={"thp": ["never", "always"]}, scenarios={"size": ["8M", "1G"]})
    assert [exp.workload_for(a)["size"] for a in exp.arms] == ["8M", "1G", "8M", "1G"]
    assert exp.factors[1].ordered and exp.factors[1].positions == (8 * 2**20, 2**30)


FLAT_SCENARIOS = """\
baseline = "thp"

[workload]
kind = "stress-ng"
stressor = "vm"
timeout_s = 2

[[arms]]
name = "small"
backing = "4k"

[[arms]]
name = "thp"
backing = "thp"
thp = "always"

[scenarios]
workers = [1, 4]
"""


def test_scenarios_beside_flat_arms_make_factor_arm(tmp_path):
    exp = load_experiment(write(tmp_path, FLAT_SCENARIOS))
    assert [f.name for f in exp.factors] == ["arm", "workers"]
    assert exp.factors[0].levels == ("thp", "small")  # the named baseline arm first
    assert names(exp) == ["thp [workers=1]", "thp [workers=4]",
                          "small [workers=1]", "small [workers=4]"]
    assert exp.baseline == "thp [workers=1]"
    assert exp.baseline_of("small [workers=4]") == "thp [workers=4]"
    small = cell(exp, "small [workers=4]")
    assert small.backing == "4k" and small.thp is None
    assert small.levels == (("arm", "small"), ("workers", "4"))
    assert exp.workload_for(small)["workers"] == 4
    default, per_arm = build_for(exp)
    assert {a: w.workers for a, w in per_arm.items()} == \
        {"thp [workers=1]": 1, "thp [workers=4]": 4, "small [workers=1]": 1, "small [workers=4]": 4}


def test_build_for_builds_one_workload_per_scenario():
    exp = exp_of(factors={"thp": ["never", "always"]}, scenarios={"threads": [1, 2]})
    _, per_arm = build_for(exp)
    assert {a: w.threads for a, w in per_arm.items()} == {
        "thp=never [threads=1]": 1, "thp=never [threads=2]": 2,
        "thp=always [threads=1]": 1, "thp=always [threads=2]": 2}
    assert per_arm["thp=never [threads=2]"] is per_arm["thp=always [threads=2]"]
    flat_default, flat = build_for(default_experiment())
    assert flat == {} and flat_default.kind == "hugelab-mem"


# --- 2. validation errors ----------------------------------------------------------------------

@pytest.mark.parametrize("extra,words", [
    ({"factors": {"vm.bogus": [1, 2]}}, "vm.bogus: not an arm setting"),
    ({"factors": {"vm": {"bogus": [1, 2]}}}, "vm.bogus: not an arm setting"),
    ({"factors": {"workers": [1, 2]}}, "workers: not an arm setting"),
    ({"factors": {"name": ["a", "b"]}}, "name: not an arm setting"),
    ({"factors": {"q": {"a": {"vm": {"bogus": 1}}}}}, "vm.bogus: not an arm setting"),
    ({"factors": {"q": {"a": {"description": "x"}}}}, "description: not an arm setting"),
    # a list where named levels are expected, a table where a list is
    ({"factors": {"qemu": {"anon": ["x"]}}}, "qemu: give a list of levels or a table"),
    ({"factors": {"q": {"a": {"thp": "never"}, "b": "x"}}}, "[factors.q] b must be a table"),
    ({"factors": {"thp": {"always": "x"}}}, "thp: give a list of levels or a table"),
    ({"factors": {"thp": "always"}}, "thp: give a list of levels or a table"),
    ({"factors": {"thp": []}}, "thp needs a list of levels"),
    ({"factors": {}}, "[factors] must be a table"),
    ({"factors": ["thp"]}, "[factors] must be a table"),
    # duplicate and malformed level names
    ({"factors": {"thp": ["always", "always"]}}, "factor 'thp' has the level always twice"),
    ({"factors": {"vm.prealloc": [True, True]}}, "has the level true twice"),
    ({"factors": {"q": {"a b": {"thp": "never"}}}}, "level name 'a b' must be"),
    ({"factors": {"thp": ["never"]}, "scenarios": {"threads": [1, "1"]}},
     "factor 'threads' has the level 1 twice"),
    # two factors setting one key
    ({"factors": {"thp": ["never", "always"], "q": {"a": {"thp": "never"}, "b": {"thp": "always"}}}},
     "factors 'thp' and 'q' both set thp"),
    ({"factors": {"vm.backing": ["anon", "memfd"],
                  "q": {"a": {"vm": {"backing": "anon"}}, "b": {"vm": {"prealloc": True}}}}},
     "factors 'vm.backing' and 'q' both set vm.backing"),
    ({"factors": {"thp": ["never"]}, "scenarios": {"thp": ["a"]}}, "factor 'thp' is declared twice"),
    # [[arms]] with [factors]; baseline forms
    ({"factors": {"thp": ["never"]}, "arms": [{"name": "a", "backing": "4k"}]},
     "either [[arms]] or [factors]"),
    ({"factors": {"thp": ["never", "always"]}, "baseline": "always"},
     "baseline is a table of levels"),
    ({"factors": {"thp": ["never", "always"]}, "baseline": {"backing": "4k"}},
     "baseline names 'backing', which is not a factor"),
    ({"factors": {"thp": ["never", "always"]}, "baseline": {"thp": "madvise"}},
     "baseline: 'madvise' is not a level of factor 'thp'"),
    # cells
    ({"factors": {"thp": ["never", "always"]}, "cells": [{"thp": "madvise"}]},
     "cells entry: 'madvise' is not a level of factor 'thp'"),
    ({"factors": {"thp": ["never", "always"]}, "cells": [{"backing": "4k"}]},
     "cells entry names 'backing', which is not a factor"),
    ({"factors": {"thp": ["never", "always"]}, "cells": [{"thp": "always"}]},
     "the baseline cell (thp=never) is not among the cells"),
    ({"factors": {"thp": ["never", "always"]}, "cells": [{"thp": "never"}],
      "baseline": {"thp": "always"}}, "the baseline cell (thp=always) is not among the cells"),
    ({"factors": {"thp": ["never", "always"]}, "scenarios": {"threads": [1, 2]},
      "cells": [{"thp": "never", "threads": 1}, {"thp": "always"}]},
     "cell 'thp=always [threads=2]' has no baseline cell in its scenario"),
    ({"factors": {"thp": ["never", "always"]}, "cells": []}, "cells is empty"),
    ({"factors": {"thp": ["never", "always"]}, "cells": {"thp": "never"}}, "cells must be a list"),
    ({"factors": {"thp": ["never", "always"]}, "cells": ["never"]}, "cells entry must be a table"),
    # [base]
    ({"factors": {"thp": ["never"]}, "base": 3}, "[base] must be a table"),
    ({"factors": {"thp": ["never"]}, "base": {"name": "x"}}, "unknown key 'name' in [base]"),
    # [base]/cells without [factors]
    ({"arms": [{"name": "a", "backing": "4k"}], "base": {"thp": "never"}}, "base goes with [factors]"),
    ({"arms": [{"name": "a", "backing": "4k"}], "cells": [{"thp": "never"}]},
     "cells goes with [factors]"),
    # [scenarios]
    ({"factors": {"thp": ["never"]}, "scenarios": {"kind": ["sysbench", "stress-ng"]}},
     "cannot sweep the workload kind"),
    ({"arms": [{"name": "a", "backing": "4k"}], "scenarios": {"kind": ["sysbench"]}},
     "cannot sweep the workload kind"),
    ({"factors": {"thp": ["never"]}, "scenarios": {"threads": 2}}, "threads needs a list of values"),
    ({"factors": {"thp": ["never"]}, "scenarios": {"threads": []}}, "threads needs a list of values"),
    ({"factors": {"thp": ["never"]}, "scenarios": {"threads": [[1], [2]]}},
     "threads needs a list of values"),
    ({"factors": {"thp": ["never"]}, "scenarios": {}}, "[scenarios] must be a table"),
    # duet
    ({"design": "duet", "factors": {"backing": ["4k", "thp"]}}, "design 'duet'"),
    ({"design": "duet", "arms": [{"name": "a", "backing": "4k"}, {"name": "b", "backing": "thp"}],
      "scenarios": {"threads": [1, 2]}}, "design 'duet'"),
    # a cell that is not a valid arm names the cell
    ({"factors": {"vm.backing": ["anon", "file"]}},
     "cell 'vm.backing=file': vm backing 'file' (hugetlbfs) needs page_size"),
    ({"factors": {"thp": ["never", "sometimes"]}}, "cell 'thp=sometimes': thp = 'sometimes'"),
    ({"factors": {"guest.thp": ["never", "always"]}}, "cell 'guest.thp=never': a [arms.guest] layer"),
    ({"factors": {"backing": ["4k", "hugetlb-3G"]}}, "cell 'backing=hugetlb-3G'"),
])
def test_factorial_errors(extra, words):
    with pytest.raises(ExperimentError) as exc:
        exp_of(**extra)
    assert words in exc.value.message


def test_file_errors_name_the_file(tmp_path):
    p = write(tmp_path, NATIVE.replace('backing = ["4k", "thp"]', 'backing = ["4k", "4k"]'))
    with pytest.raises(ExperimentError) as exc:
        load_experiment(p)
    assert str(p) in exc.value.message and "has the level 4k twice" in exc.value.message


def test_hints_say_what_to_do():
    with pytest.raises(ExperimentError) as exc:
        exp_of(factors={"vm.bogus": [1, 2]})
    assert "vm.prealloc" in exc.value.hint and "guest.thp" in exc.value.hint
    with pytest.raises(ExperimentError) as exc:
        exp_of(factors={"thp": ["never", "always"]}, baseline={"thp": "madvise"})
    assert exc.value.hint == "levels: never, always"


@pytest.mark.parametrize("table", ["vm", "guest"])
def test_empty_vm_or_guest_factor_table_is_an_error(table):
    with pytest.raises(ExperimentError, match=table):
        exp_of(factors={table: {}})


def test_table_where_dotted_setting_wants_a_list_names_the_setting(tmp_path):
    text = "[factors]\nvm.prealloc = { off = false, on = true }\n"
    with pytest.raises(ExperimentError) as exc:
        load_experiment(write(tmp_path, text))
    assert "vm.prealloc" in exc.value.message


def test_pools_with_two_sizes_can_be_swept():
    exp = exp_of(base={"backing": "hugetlb-2M"},
                 factors={"pools": [{"2M": 64, "1G": 1}, {"2M": 128}]})
    assert len(exp.arms) == 2
    assert {p.size for p in exp.arms[0].pools} == {"2M", "1G"}
    assert all("," not in lv for f in exp.factors for lv in f.levels)  # cell names stay parseable


def test_vm_kernel_paths_can_be_swept():
    exp = exp_of(factors={"vm.kernel": ["/boot/vmlinuz-a", "/boot/vmlinuz-b"]})
    assert [a.vm.kernel for a in exp.arms] == ["/boot/vmlinuz-a", "/boot/vmlinuz-b"]


def _stress(workers):
    return exp_of(factors={"thp": ["never", "always"]}, scenarios={"workers": workers},
                  workload={"kind": "stress-ng", "stressor": "vm", "timeout_s": 1})


def test_build_for_bad_scenario_value_names_the_scenario():
    with pytest.raises(ExperimentError) as exc:
        build_for(_stress([1, "x"]))
    assert "scenario workers = 'x'" in exc.value.message and "integer" in exc.value.message


def test_build_for_bad_first_scenario_value_names_the_scenario():
    with pytest.raises(ExperimentError) as exc:
        build_for(_stress(["x", 1]))
    assert "scenario workers = 'x'" in exc.value.message


def test_errors_are_only_experiment_errors():
    """Odd inputs never escape as another exception type."""
    odd = [{"factors": {"thp": [None]}}, {"factors": {"thp": [{"a": 1}]}},
           {"factors": {"q": {"a": {"vm": 3}}}}, {"factors": {"thp": ["never"]}, "base": {"vm": 3}},
           {"factors": {"thp": ["never"]}, "baseline": {"thp": ["never"]}},
           {"factors": {"thp": ["never"]}, "cells": [{"thp": {"a": 1}}]},
           {"factors": {"vm.mem": ["lots", "1G"]}}, {"factors": {"pools": [3, 4]}},
           {"factors": {"vm.cpu_pin": [[0], ["x"]]}}, {"factors": 3}, {"scenarios": {"a": [1]}}]
    for extra in odd:
        try:
            exp_of(**extra)
        except ExperimentError:
            pass


# --- 3. identity -------------------------------------------------------------------------------

FLAT = """\
name = "flat"
seed = 3
blocks = 4
baseline = "thp"
description = "two arms and a guest"

[workload]
kind = "hugelab-mem"
workload = "chase"
size = "64M"
duration = 0.5

[[arms]]
name = "small"
backing = "4k"
thp = "never"

[[arms]]
name = "thp"
backing = "thp"
thp = "always"
pools = { "2M" = 16 }

[[arms]]
name = "guest"
backing = "4k"
[arms.vm]
backing = "file"
page_size = "2M"
mem = "1G"
cpu_pin = [0, 1]
[arms.guest]
thp = "never"
"""

FLAT_DICT = {  # FLAT as the model had it before factors existed
    "name": "flat", "description": "two arms and a guest", "seed": 3, "blocks": 4,
    "design": "paired", "baseline": "thp", "thp_min_fraction": 0.5,
    "workload": {"kind": "hugelab-mem", "workload": "chase", "size": "64M", "duration": 0.5},
    "arms": [
        {"name": "small", "backing": "4k", "thp": "never", "thp_defrag": None, "pools": [],
         "description": "", "vm": None, "guest": None},
        {"name": "thp", "backing": "thp", "thp": "always", "thp_defrag": None,
         "pools": [{"size": "2M", "pages": 16, "node": None}], "description": "", "vm": None,
         "guest": None},
        {"name": "guest", "backing": "4k", "thp": None, "thp_defrag": None, "pools": [],
         "description": "",
         "vm": {"backing": "file", "page_size": "2M", "prealloc": False, "share": False,
                "mem_mib": 1024, "vcpus": 1, "vms": 1, "numa_node": None, "cpu_pin": [0, 1],
                "kernel": None, "accel": "auto"},
         "guest": {"thp": "never", "pools_2m": None, "pools_1g": None}},
    ],
}


def _key(d):
    canon = json.dumps(d, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canon.encode()).hexdigest()[:16]


def test_flat_experiment_identity_is_unchanged(tmp_path):
    exp = load_experiment(write(tmp_path, FLAT, "flat.toml"))
    d = exp.to_dict()
    assert "factors" not in d
    assert all("levels" not in a and "workload" not in a for a in d["arms"])
    assert json.loads(json.dumps(d)) == FLAT_DICT
    assert exp.key() == _key(FLAT_DICT) == "89f68a89dc7348e4"  # the key before factors
    assert default_experiment().key() == "b2a9173f18acce68"
    assert Experiment.from_dict(json.loads(json.dumps(d))) == exp


def test_factorial_experiments_round_trip_through_json(tmp_path):
    exps = [load_experiment(write(tmp_path, NATIVE)),
            load_experiment(write(tmp_path, NAMED_AND_DOTTED)),
            load_experiment(write(tmp_path, FLAT_SCENARIOS)),
            exp_of(factors={"vm.cpu_pin": [[0], [0, 1]], "pools": [{"2M": 8}, {"2M": 16}]},
                   base={"backing": "hugetlb-2M"}, scenarios={"size": ["8M", "16M"]},
                   baseline={"pools": {"2M": 16}})]
    keys = set()
    for exp in exps:
        d = exp.to_dict()
        assert "factors" in d and all("levels" in a for a in d["arms"])
        again = Experiment.from_dict(json.loads(json.dumps(d)))
        assert again == exp and again.key() == exp.key()
        keys.add(exp.key())
    assert len(keys) == len(exps)
    assert exps[3].arms[0].vm.cpu_pin == (0,) and exps[3].arms[0].pools[0].pages == 16


def test_key_depends_on_the_design():
    a = exp_of(factors={"thp": ["never", "always"]})
    b = exp_of(factors={"thp": ["never", "always"]}, baseline={"thp": "always"})
    c = exp_of(factors={"thp": ["never", "always"]}, scenarios={"threads": [1]})
    assert len({a.key(), b.key(), c.key()}) == 3


# --- 4. cost -----------------------------------------------------------------------------------

@pytest.mark.parametrize("table,seconds", [
    ({"kind": "sysbench"}, 10.0), ({"kind": "sysbench", "time_s": 3}, 3.0),
    ({"kind": "stress-ng"}, 10.0), ({"kind": "stress-ng", "timeout_s": "2m"}, 120.0),
    ({"kind": "iperf3"}, 5.0), ({"kind": "iperf3", "duration_s": 7}, 7.0),
    ({"kind": "hugelab-mem"}, 1.0), ({"kind": "hugelab-mem", "duration": 0.2}, 0.2),
    ({"kind": "hugelab-mem", "duration_s": 0.3}, 0.3),
    ({"kind": "hugelab-mem", "duration": "500ms"}, 0.5),
    ({"kind": "build"}, None), ({"kind": "build", "timeout_s": 30}, 30.0),
    ({"kind": "command"}, None), ({"kind": "command", "timeout_s": "1.5h"}, 5400.0),
    ({"kind": "redis"}, pytest.approx(1e6 / 3e5 + 2e5 / 5e4)),  # preload, 2 tests of 1e5
    ({"kind": "redis", "timeout_s": 4.5}, 4.5),
    ({"kind": "nope", "timeout_s": 3}, None), ({"kind": "command", "timeout_s": "soon"}, None),
    ({"kind": "command", "timeout_s": True}, None),
])
def test_workload_seconds(table, seconds):
    assert workload_seconds(table) == seconds


def _mixed(**extra):
    """One native and one guest arm, 3 blocks, 1 s trials."""
    return parse_experiment({"blocks": 3, "workload": {**MEM, "duration": 1.0},
                             "arms": [{"name": "n", "backing": "4k"},
                                      {"name": "g", "backing": "4k", "vm": {"accel": "tcg"}}],
                             **extra})


def test_estimate_adds_boot_only_to_guest_arms():
    est = estimate(_mixed())
    assert est.per_arm == {"n": 1.5, "g": 1.5 + 8.0}
    assert est.per_block_s == 11.0 and est.seconds == 33.0 and est.trials == 6
    assert est.basis == {"n": "configured", "g": "configured"}
    assert (est.boot_s, est.boot_basis) == (8.0, "assumed (tcg)")
    kvm = estimate(_mixed(), accel="kvm")
    assert kvm.per_arm["g"] == 3.5 and kvm.boot_basis == "assumed (kvm)"
    meas = estimate(_mixed(), Measured(boot_s=3.0))
    assert meas.per_arm == {"n": 1.5, "g": 4.5} and meas.boot_basis == "measured"


def test_estimate_sums_a_block_and_a_duet_takes_its_longest():
    paired = parse_experiment({"blocks": 2, "workload": MEM, "arms": [
        {"name": "a", "backing": "4k"}, {"name": "b", "backing": "thp"}]})
    duet = replace(paired, design="duet")
    m = Measured(trial_s={"a": 2.0})
    assert estimate(paired, m).per_block_s == pytest.approx(2.7)
    assert estimate(duet, m).per_block_s == 2.0 and estimate(duet, m).seconds == 4.0
    assert estimate(duet).per_block_s == pytest.approx(0.7)


def test_interleaved_servers_take_turns_and_redis_windows_have_a_duration():
    arms = [{"name": "a", "backing": "thp", "thp": "always"},
            {"name": "b", "backing": "thp", "thp": "always", "app": {"disable-thp": "yes"}}]
    redis = parse_experiment({"blocks": 2, "design": "interleaved", "arms": arms,
                              "workload": {"kind": "redis", "duration_s": 4, "window_s": 1}})
    assert workload_seconds(redis.workload) == pytest.approx(1e6 / 3e5 + 2e5 / 5e4)  # paired: requests
    assert workload_seconds(redis.workload, "interleaved") == 4.0
    # each server its windows, after its preload (the default million keys at 300,000 a second)
    assert estimate(redis).per_block_s == pytest.approx(2 * (4.5 + 1e6 / 3e5))


def test_measured_trial_times_win_over_configured():
    est = estimate(_mixed(), Measured(trial_s={"g": 42.0, "elsewhere": 1.0}))
    assert est.per_arm == {"n": 1.5, "g": 42.0}
    assert est.basis == {"n": "configured", "g": "measured"}
    assert est.seconds == 3 * 43.5


def test_unknown_workload_time_counts_zero_and_says_so():
    exp = parse_experiment({"blocks": 2, "workload": {"kind": "command", "argv": ["true"]},
                            "arms": [{"name": "a", "backing": "4k"}]})
    est = estimate(exp)
    assert est.per_arm == {"a": None} and est.basis == {"a": "unknown"} and est.seconds == 0.0


def test_estimate_follows_each_scenario():
    exp = exp_of(blocks=2, factors={"thp": ["never", "always"]},
                 scenarios={"duration": [1, 3]})
    est = estimate(exp)
    assert est.per_arm == {"thp=never [duration=1]": 1.5, "thp=never [duration=3]": 3.5,
                           "thp=always [duration=1]": 1.5, "thp=always [duration=3]": 3.5}
    assert est.seconds == 2 * 10.0 and est.trials == 8


def test_cuts_cheapest_first_and_skip_one_level_factors():
    exp = exp_of(blocks=10, factors={"thp": ["never", "madvise", "always"],
                                     "backing": ["4k", "thp"], "thp_defrag": ["madvise"]},
                 scenarios={"threads": [1, 2]})
    assert estimate(exp).seconds == pytest.approx(10 * 12 * 0.7)
    got = cuts(exp)
    assert [n for n, _ in got] == ["thp", "backing", "threads"]
    assert [s for _, s in got] == pytest.approx([10 * 4 * 0.7, 10 * 6 * 0.7, 10 * 6 * 0.7])
    assert cuts(default_experiment()) == []


def test_over_budget_names_the_factor_to_cut():
    exp = exp_of(blocks=10, factors={"thp": ["never", "madvise", "always"],
                                     "backing": ["4k", "thp"]})  # 42 s
    text = over_budget(exp, Measured(), "tcg", estimate(exp).seconds, 30.0)
    assert "over the budget of 30 s" in text
    assert "cut factor 'backing' to one level (21 s)" in text  # keeps the most while fitting
    assert "run 7 blocks instead of 10" in text
    text = over_budget(exp, Measured(), "tcg", estimate(exp).seconds, 5.0)
    assert "cutting factor 'thp' to one level saves the most and still leaves 14 s" in text


@pytest.mark.parametrize("seconds,text", [
    (0, "0 s"), (0.4, "0 s"), (59.4, "59 s"), (60, "1 min"), (200, "3 min 20 s"),
    (3599.6, "1 h"), (3600, "1 h"), (7500, "2 h 05 min"), (5430, "1 h 30 min"),
])
def test_human(seconds, text):
    assert human(seconds) == text


@pytest.mark.parametrize("text,seconds", [
    ("90m", 5400), ("2h", 7200), ("1h30m", 5400), ("45s", 45), ("1.5h", 5400),
    (" 2H ", 7200), ("1h 30m", 5400), ("1h30m15s", 5415),
])
def test_parse_budget(text, seconds):
    assert parse_budget(text) == seconds


@pytest.mark.parametrize("text", ["", "90", "abc", "90x", "m", "-5m", "1h30", "1.5.5h", "h1"])
def test_parse_budget_rejects_junk(text):
    with pytest.raises(argparse.ArgumentTypeError, match="not a duration"):
        parse_budget(text)


# --- 5. CLI dry run ----------------------------------------------------------------------------

GUEST = """\
name = "guest-factorial"
blocks = 2

[vm]
accel = "tcg"

[workload]
kind = "hugelab-mem"
workload = "chase"
size = "16M"
duration = 0.2

[factors.qemu]
anon = { vm = { backing = "anon" } }
file2m = { vm = { backing = "file", page_size = "2M" } }
"""


def run_cli(tmp_path, *args):
    env = {**os.environ, "HUGELAB_STATE_DIR": str(tmp_path / "state"), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "hugelab.cli", "run", *map(str, args),
                           "--store", str(tmp_path / "x.db")],
                          capture_output=True, text=True, env=env, timeout=60)


def main_in_process(tmp_path, monkeypatch, capsys, *args):
    """The same command in this process (no interpreter start): (exit code, stdout, stderr)."""
    from hugelab.cli.main import main
    monkeypatch.setenv("HUGELAB_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("COLUMNS", "200")
    try:
        rc = main(["run", *map(str, args), "--store", str(tmp_path / "x.db")])
    except SystemExit as exc:  # argparse
        rc = exc.code
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.slow
def test_dry_run_native_factorial(tmp_path):
    r = run_cli(tmp_path, write(tmp_path, NATIVE), "--dry-run", "--json")
    assert r.returncode == 0, r.stderr
    p = json.loads(r.stdout)
    assert [c["name"] for c in p["cells"]] == names(load_experiment(tmp_path / "exp.toml"))
    assert len(p["cells"]) == 8 and p["trials_per_block"] == 8 and p["trials"] == 16
    assert {m["enabled"] for m in p["host_changes"]["thp_modes"]} == {"madvise", "always"}
    assert p["host_changes"]["pools"] == [] and p["guests_per_block"] == 0
    assert p["estimated_s"] > 0 and p["estimated_s"] == pytest.approx(2 * 8 * 0.7)
    assert p["budget_s"] is None and p["warnings"] == []
    assert [f["name"] for f in p["factors"]] == ["thp", "backing", "threads"]
    assert p["cells"][0]["levels"] == {"thp": "madvise", "backing": "4k", "threads": "1"}
    assert not (tmp_path / "x.db").exists() and not (tmp_path / "state").exists()


def test_dry_run_budget_warns_and_names_a_factor(tmp_path, monkeypatch, capsys):
    rc, out, err = main_in_process(tmp_path, monkeypatch, capsys, write(tmp_path, NATIVE),
                                   "--dry-run", "--budget", "1s")
    assert rc == 0, err
    out = " ".join(out.split())
    assert "8 cell(s)" in out and "scenarios (every cell above runs in each): threads=1, threads=2" in out
    assert "warning:" in out and "over the budget of 1 s" in out
    assert any(f"factor '{f}'" in out for f in ("thp", "backing", "threads"))
    assert not (tmp_path / "x.db").exists()


@pytest.mark.slow
def test_budget_without_dry_run_is_a_usage_error(tmp_path):
    r = run_cli(tmp_path, write(tmp_path, NATIVE), "--budget", "1h")
    assert r.returncode != 0
    assert "--budget goes with --until-verdict" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "x.db").exists()


def test_until_verdict_budget_previews_the_blocks_it_fits(tmp_path, monkeypatch, capsys):
    rc, out, err = main_in_process(tmp_path, monkeypatch, capsys, write(tmp_path, NATIVE),
                                   "--until-verdict", "--budget", "2m", "--dry-run", "--json")
    assert rc == 0, err
    p = json.loads(out)  # 8 cells of 0.7 s a block: 5.6 s; (120 - 5) / 5.6 -> 20 blocks
    assert p["blocks"] == 20 and p["budget_s"] == 120 and p["warnings"] == []
    assert p["until_verdict"] is True
    rc, out, err = main_in_process(tmp_path, monkeypatch, capsys, write(tmp_path, NATIVE),
                                   "--until-verdict", "--budget", "2m", "--dry-run")
    assert rc == 0, err
    assert "with --until-verdict: about 20 blocks fit the budget by this estimate; the run " \
        "times its blocks, plans its looks from them and ends within the budget" in \
        " ".join(out.split())
    rc, out, err = main_in_process(tmp_path, monkeypatch, capsys, write(tmp_path, NATIVE),
                                   "--until-verdict", "--budget", "30s")
    assert rc == 2 and "holds about 4 blocks" in err and "needs 6 or more" in err, err
    assert "--budget 1m" in err and "Traceback" not in err
    assert not (tmp_path / "x.db").exists()


def test_budget_junk_is_an_argument_error(tmp_path, monkeypatch, capsys):
    rc, _, err = main_in_process(tmp_path, monkeypatch, capsys, write(tmp_path, NATIVE),
                                 "--dry-run", "--budget", "soon")
    assert rc == 2 and "not a duration" in err and "Traceback" not in err


def test_dry_run_guest_factorial(tmp_path, monkeypatch, capsys):
    rc, out, err = main_in_process(tmp_path, monkeypatch, capsys, write(tmp_path, GUEST),
                                   "--dry-run", "--json")
    assert rc == 0, err
    p = json.loads(out)
    assert [c["name"] for c in p["cells"]] == ["qemu=anon", "qemu=file2m"]
    assert [c["guests"] for c in p["cells"]] == ["1x512M anon", "1x512M file-2M"]
    assert all(c["layer"] == "guest" for c in p["cells"])
    pools = p["host_changes"]["pools"]
    assert [x["size"] for x in pools] == ["2M"] and pools[0]["pages"] > 0
    assert p["host_changes"]["hugetlbfs_mounts"] == ["2M"]
    assert p["guests_per_block"] == 2 and p["trials_per_block"] == 2
    assert p["boot_basis"] == "assumed (tcg)"
    assert p["estimated_s"] == pytest.approx(2 * 2 * (0.2 + 0.5 + 8.0))
    assert not (tmp_path / "x.db").exists() and not (tmp_path / "state").exists()


def test_arm_model_defaults_keep_flat_arms_flat():
    a = Arm("x", "4k", vm=VmLayer())
    assert a.levels == () and a.workload == () and a.layer == "guest"


@pytest.mark.parametrize(("extra", "words"), [
    ({"factors": {"thp": ["never", "always"]}, "scenarios": {"threads": [1, 2]},
      "baseline": {"threads": 2}}, "baseline names 'threads', a scenario"),
    ({"factors": {"arm": ["4k", "thp"]}}, "'arm' is reserved"),
])
def test_more_factorial_errors(extra, words):
    with pytest.raises(ExperimentError) as exc:
        exp_of(**extra)
    assert words in exc.value.message


def test_estimate_assumes_a_kvm_boot_when_every_guest_asks_for_kvm():
    exp = exp_of(factors={"vm.backing": ["anon", "memfd"]}, vm={"accel": "kvm"})
    est = estimate(exp)
    assert est.boot_s == 2.0 and est.boot_basis == "assumed (kvm)"


def test_cuts_never_leave_nothing_to_compare():
    exp = exp_of(factors={"thp": ["never", "always"]}, scenarios={"threads": [1, 2, 4, 8]})
    assert [name for name, _ in cuts(exp)] == ["threads"]  # cutting thp leaves no comparison
    two = exp_of(factors={"thp": ["never", "always"], "backing": ["4k", "thp"]})
    assert {name for name, _ in cuts(two)} == {"thp", "backing"}
