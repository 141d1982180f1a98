"""Experiment files that would have measured something else without a word: a [vm] table of
guest defaults that no arm uses (every arm ran natively), and a [workload] without a kind,
whose hint must point at a page that lists the kinds."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from hugelab.errors import ExperimentError
from hugelab.experiment import load_experiment, parse_experiment

DOCS = Path(__file__).resolve().parent.parent / "docs"

UNUSED_VM = """\
name = "forgot-the-arms-vm"
blocks = 2

[vm]
domain = "hugelab-demo-debian"
mem = "2G"

[[arms]]
name = "4k"
backing = "4k"

[[arms]]
name = "thp"
backing = "thp"
thp = "always"
"""


def test_vm_defaults_no_arm_uses_are_an_error_with_the_fix(tmp_path):
    f = tmp_path / "e.toml"
    f.write_text(UNUSED_VM)
    with pytest.raises(ExperimentError) as exc:
        load_experiment(f)
    assert exc.value.message == f"{f}: line 5: [vm] sets guest defaults, but no arm runs in " \
        "a guest: every arm would run natively on this host"
    assert "vm = {}" in str(exc.value.hint) and "[arms.vm]" in str(exc.value.hint)
    # the fix the hint names: an arm with vm = {} runs in the guest with the [vm] defaults
    fixed = tmp_path / "fixed.toml"
    fixed.write_text(UNUSED_VM.replace('backing = "4k"\n', 'backing = "4k"\nvm = {}\n'))
    exp = load_experiment(fixed)
    vm = {a.name: a.vm for a in exp.arms}
    assert vm["thp"] is None and vm["4k"] is not None and vm["4k"].domain == "hugelab-demo-debian"
    assert vm["4k"].mem_mib == 2048


def test_a_workload_without_a_kind_points_at_the_page_that_lists_the_kinds():
    d = tomllib.loads('[workload]\nsize = "1G"\n[[arms]]\nname = "4k"\nbacking = "4k"\n')
    with pytest.raises(ExperimentError) as exc:
        parse_experiment(d)
    hint = str(exc.value.hint)
    page, _, title = hint.partition(" lists the kinds under ")
    assert page == "docs/experiments.md", hint
    text = (DOCS / "experiments.md").read_text()
    assert f"## {title.strip(chr(39))}\n" in text, hint
