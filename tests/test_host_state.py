"""host_state as an arm setting (issue 38): parsing, the split-plot schedule that changes the
host's state once per state and block, the trial's host check, the cost record's measured
fragmentation; and for real, a `hugelab run` SIGKILLed while it holds the host fragmented,
then `hugelab recover`: no holder, no record, the host as found."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import tomllib
from pathlib import Path

import pytest

from hugelab.errors import ExperimentError
from hugelab.experiment.model import schedule
from hugelab.experiment.parse import parse_experiment
from hugelab.trial import costs
from hugelab.trial.judge import host_state_check
from tests.helpers import HUGELAB
from tests.hostguard import host_state

BASE = """\
name = "aged"
seed = 3
blocks = 5
[workload]
kind = "hugelab-mem"
size = "64M"
"""
ARMS = """\
[[arms]]
name = "4k"
backing = "4k"
host_state = "fresh"
[[arms]]
name = "thp"
backing = "thp"
host_state = "fresh"
[[arms]]
name = "4k-aged"
backing = "4k"
host_state = "fragmented"
[[arms]]
name = "thp-aged"
backing = "thp"
host_state = "fragmented"
fragment = 0.8
"""


def parse(text: str):
    return parse_experiment(tomllib.loads(text), text)


def test_host_state_and_fragment_are_parsed_with_their_defaults_and_lines():
    exp = parse(BASE + ARMS)
    by = {a.name: a for a in exp.arms}
    assert by["4k"].host_state == "fresh" and by["4k"].fragment is None
    assert by["4k-aged"].fragment == 0.9 and by["thp-aged"].fragment == 0.8
    assert exp.to_dict()["arms"][2]["host_state"] == "fragmented"
    plain = parse(BASE + '[[arms]]\nname = "a"\nbacking = "4k"\n')
    assert "host_state" not in plain.to_dict()["arms"][0]  # identities stay as they were
    with pytest.raises(ExperimentError, match=r"line 10: .*host_state = 'aged' is not one of"):
        parse(BASE + '[[arms]]\nname = "a"\nbacking = "4k"\nhost_state = "aged"\n')
    with pytest.raises(ExperimentError, match=r"line 10: .*fragment = 0.9 goes with host_state"):
        parse(BASE + '[[arms]]\nname = "a"\nbacking = "4k"\nfragment = 0.9\n')
    with pytest.raises(ExperimentError, match=r"fragment = 1.5 must be a share between 0 and 1"):
        parse(BASE + '[[arms]]\nname = "a"\nbacking = "4k"\nhost_state = "fragmented"\n'
              'fragment = 1.5\n')


def test_a_block_runs_each_host_states_arms_together_in_drawn_orders():
    exp = parse(BASE + ARMS)
    state = {a.name: (a.host_state, a.fragment) for a in exp.arms}
    orders = []
    for block in range(exp.blocks):
        order = [t.arm for t in schedule(exp) if t.block == block]
        assert sorted(order) == sorted(state)
        runs = [state[a] for i, a in enumerate(order) if i == 0 or state[a] != state[order[i - 1]]]
        assert len(runs) == len(set(runs)) == 3  # each state's arms contiguous
        orders.append(order)
    assert len({tuple(o) for o in orders}) > 1  # orders drawn per block
    assert schedule(exp) == schedule(parse(BASE + ARMS))  # from the seed
    flat = parse(BASE + '[[arms]]\nname = "a"\nbacking = "4k"\n[[arms]]\nname = "b"\n'
                 'backing = "thp"\n')
    assert [t.arm for t in schedule(flat)][:2] in (["a", "b"], ["b", "a"])


def test_a_fragmented_trial_that_missed_its_target_is_contradicted_and_its_state_recorded():
    met = {"state": "fragmented", "unusable": 0.91, "target": 0.9, "missed": None}
    missed = {**met, "unusable": 0.6, "missed": "fragmentation 0.600 below the target 0.90"}
    assert host_state_check({"host_state": met})[0].status == "verified"
    check = host_state_check({"host_state": missed})[0]
    assert check.status == "contradicted" and check.layer == "host" and "0.600" in check.reason
    assert host_state_check({"host_state": {"state": "fresh", "unusable": 0.4}}) == []
    assert host_state_check({}) == []
    rec = costs.record({}, {"host_state": missed}, pool_held_kb=0)
    assert rec["host_unusable"] == 0.6


KILLED = """\
name = "aged-kill"
seed = 4
blocks = 1
[workload]
kind = "hugelab-mem"
workload = "chase"
size = "64M"
duration = 60
[[arms]]
name = "4k-aged"
backing = "4k"
host_state = "fragmented"
fragment = 0.5
"""


def _holders() -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if b"hugelab.host.fraghold" in cmd:
                out.append(int(entry.name))
    return out


@pytest.mark.host
@pytest.mark.slow
@pytest.mark.fills_memory
def test_a_run_killed_while_the_host_is_held_fragmented_leaves_nothing_after_recover(
        tmp_path):
    state = tmp_path / "state"
    env = {**os.environ, "HUGELAB_STATE_DIR": str(state)}
    before = host_state()
    (tmp_path / "e.toml").write_text(KILLED)
    run = subprocess.Popen([*HUGELAB, "run", "e.toml", "--store", "s.db"], cwd=tmp_path,
                           env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not list(state.glob("workload-*.json")):
            assert run.poll() is None, "the run ended before its trial started"
            time.sleep(0.5)  # the trial starts once the holder is ready: memory is held
        assert _holders() and list(state.glob("fragment-*.json"))
    finally:
        run.send_signal(signal.SIGKILL)
        run.wait()
    out = subprocess.run([*HUGELAB, "recover"], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    deadline = time.monotonic() + 20
    while _holders() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _holders() and not list(state.glob("fragment-*.json"))
    assert host_state() == before
