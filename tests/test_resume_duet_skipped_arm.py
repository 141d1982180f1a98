"""Resuming a duet whose other arm was skipped (its 1 GiB pool could not be had) keeps the
remaining arm's ok trials: it runs none of them again (issue 40: the run's second call reran
every block of the arm that ran, the skipped arm's missing trials making each block look
unfinished). A fake sysfs tree (tests/fakehost.py) whose 1 GiB pool cannot grow gives the
skip; the trials run a deterministic workload on a recording target."""

from __future__ import annotations

import sqlite3

from hugelab.experiment import Arm, Experiment
from hugelab.runner import Runner
from tests.helpers import DeterministicWorkload, Recorder
from tests.helpers import env as env  # noqa: F401 - the runner tests' fake host and store

GB1 = 1048576


def _duet(blocks: int = 2) -> Experiment:
    return Experiment("duet", (Arm("thp", "thp"), Arm("1g", "hugetlb-1G")), {"kind": "fake"},
                      seed=3, blocks=blocks, baseline="thp", design="duet")


def test_a_resumed_duet_keeps_the_ok_trials_of_the_arm_beside_a_skipped_one(env):  # noqa: F811
    host, session, store, kernel = env
    kernel.pool_cap[GB1] = 0  # no 1 GiB page can be had: the 1g arm is skipped
    first = Recorder()
    out = Runner(_duet(), store, DeterministicWorkload(), target=first, session=session,
                 paths=host).run()
    assert "1g" in out.skipped and out.executed == 2 and first.calls == ["thp", "thp"]
    before = {(t["block"], t["arm"]): (t["status"], t["attempts"], t["started"])
              for t in store.trials(out.run_id)}
    assert before == {(b, "thp"): ("ok", 1, before[(b, "thp")][2]) for b in (0, 1)}

    again = Recorder()
    out2 = Runner(_duet(), store, DeterministicWorkload(), target=again, session=session,
                  paths=host).run()
    assert out2.resumed and out2.run_id == out.run_id and "1g" in out2.skipped
    assert out2.executed == 0 and again.calls == []  # nothing ran again
    after = {(t["block"], t["arm"]): (t["status"], t["attempts"], t["started"])
             for t in store.trials(out.run_id)}
    assert after == before


def test_a_resume_still_runs_the_block_a_killed_run_left(env, tmp_path):  # noqa: F811
    host, session, store, kernel = env
    kernel.pool_cap[GB1] = 0
    out = Runner(_duet(blocks=3), store, DeterministicWorkload(), target=Recorder(),
                 session=session, paths=host).run()
    assert out.executed == 3
    with sqlite3.connect(tmp_path / "h.db") as con:  # as if killed before block 2 committed
        con.execute("DELETE FROM trials WHERE run_id = ? AND block = 2", (out.run_id,))
    more = Recorder()
    out2 = Runner(_duet(blocks=3), store, DeterministicWorkload(), target=more,
                  session=session, paths=host).run()
    assert out2.resumed and out2.executed == 1 and more.calls == ["thp"]
    assert sorted((t["block"], t["attempts"]) for t in store.trials(out.run_id)) == \
        [(0, 1), (1, 1), (2, 1)]
