"""The kill loop's foreign holders (bench/foreign_holders.py): the pure parts that decide what
counts as a host difference and as a holder's pages disturbed, and how a round is planned."""

from __future__ import annotations

import random

from bench.foreign_holders import MAX_HOLDERS, host_differences, intact, next_event
from bench.kill_loop import plan_round

BEFORE = {"thp": "madvise", "pool2048": "16", "surplus2048": "0", "pool1048576": "0",
          "surplus1048576": "0", "hugetlbfs": ""}


def test_a_holders_surplus_pages_are_no_host_difference():
    now = {**BEFORE, "pool2048": "30", "surplus2048": "14"}  # 14 pages a holder took
    assert host_differences(BEFORE, now) == {}


def test_a_persistent_pool_left_raised_or_shrunk_is_a_difference():
    assert host_differences(BEFORE, {**BEFORE, "pool2048": "48"}) == {"persistent2048": "16 -> 48"}
    assert host_differences(BEFORE, {**BEFORE, "pool2048": "20", "surplus2048": "10"}) == {
        "persistent2048": "16 -> 10"}


def test_every_other_setting_is_compared_exactly():
    now = {**BEFORE, "thp": "always", "pool1048576": "1", "hugetlbfs": "/mnt/x"}
    assert host_differences(BEFORE, now) == {
        "thp": "madvise -> always", "pool1048576": "0 -> 1", "hugetlbfs": " -> /mnt/x"}
    assert host_differences(BEFORE, {k: v for k, v in BEFORE.items() if k != "thp"}) == {
        "thp": "madvise -> None"}


def test_a_holders_pages_are_intact_only_when_its_claim_stands():
    assert intact((12, 24576), (12, 24576))
    assert intact((10, 8192), (10, 12288))  # a PostgreSQL faulting in more of its memory
    assert not intact((12, 24576), (12, 20480))  # pages it had faulted in were taken
    assert not intact((12, 24576), (11, 24576))  # its mapping changed
    assert not intact((12, 24576), None)  # killed, or its segment removed


def test_arrivals_and_departures_keep_between_none_and_the_most_holders():
    rng = random.Random(1)
    assert all(next_event(rng, 0) == "arrive" for _ in range(50))
    assert all(next_event(rng, MAX_HOLDERS) == "depart" for _ in range(50))
    assert {next_event(rng, 1) for _ in range(50)} == {"arrive", "depart"}


def test_a_seed_kills_at_the_same_moments_with_and_without_holders():
    def delays(holders: bool, restarts: bool) -> list[float]:
        rng, hrng = random.Random(3), random.Random("holders-3")
        return [plan_round(rng, hrng, 4.0, restarts, holders).delay for _ in range(20)]
    assert delays(True, False) == delays(False, False)
    assert delays(True, True) == delays(False, True)


def test_a_rounds_faults_come_in_time_order_before_the_kill():
    rng, hrng = random.Random(5), random.Random(6)
    for _ in range(100):
        r = plan_round(rng, hrng, 4.0, True, True)
        assert 0.2 <= r.delay <= 4.0
        assert sorted(w for _, w, _ in r.events) == ["holder", "restart"]
        assert [at for at, _, _ in r.events] == sorted(at for at, _, _ in r.events)
        assert all(0.0 <= at <= r.delay for at, _, _ in r.events)
        assert all(0.0 <= down <= 2.0 for _, _, down in r.events)
