"""hugelab.walks, the walk budget the tree sampler and the server keeper's picture share: a walk
while the walks' CPU is within FREE_S plus SHARE of the time since the start, or when the RSS
moved by more than MOVED since the last walk."""

from __future__ import annotations

import pytest

from hugelab import walks


@pytest.fixture
def clock(monkeypatch):
    now = [1000.0]
    monkeypatch.setattr(walks.time, "monotonic", lambda: now[0])
    return now


def test_the_budget_grows_with_the_time_since_the_start(clock):
    w = walks.Walks()
    assert w.within()  # nothing spent
    w.walked(walks.FREE_S + 0.001, 100_000)
    assert not w.within() and not w.due(100_000)
    clock[0] += 0.001 / walks.SHARE + 0.01  # the share of the time since the start covers it
    assert w.within() and w.due(100_000)


def test_a_move_past_the_share_since_the_last_walk_is_due_over_the_budget(clock):
    w = walks.Walks()
    assert w.moved(50) and not w.moved(None)  # before any walk: yes; unread: no
    w.walked(1.0, 100_000)  # far over the budget
    step = int(walks.MOVED * 100_000)
    assert not w.due(100_000 + step) and not w.due(100_000 - step)
    assert w.due(100_000 + step + 1) and w.due(100_000 - step - 1)
    w.walked(0.0, 100_000 + step + 1)  # the move is measured from the last walk
    assert not w.due(100_000 + step + 1) and w.count == 2 and w.cpu_s == 1.0
