"""Issue 39's twins' lean: an interleaved run's positions balanced, not only random. Each block
of an interleaved run starts its servers in the block's order, and each of hugelab-reqmix's
blocks (and each pair of rounds of the window design) leads with one arm. Drawn independently
per block, a 30-block run could start its twin before the arm it copies in 6 blocks of 30
(redis-thp-interleaved, seed 901) and a 30-block client run could lead with one arm 4 times and
with another 13 (seed 902). These fail on the code before balanced orders and pass with them."""

from __future__ import annotations

import random
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from hugelab.experiment import Arm, Experiment, schedule
from hugelab.workloads import reqmix_build
from hugelab.workloads.interleave import order
from hugelab.workloads.reqmix import ReqmixSettings, memcached_server, parse_output, reqmix_argv
from tests import reqmix_servers as rs

pytestmark = pytest.mark.beside  # lock-free tests here run beside the machine lane (docs/testing.md)

REDIS_ARMS = (Arm("thp", "thp"), Arm("disable-thp", "thp"), Arm("thp-again", "thp"))


def _interleaved(seed: int, blocks: int, arms: tuple[Arm, ...] = REDIS_ARMS) -> Experiment:
    return Experiment("aa", arms, {"kind": "fake"}, seed=seed, blocks=blocks,
                      baseline=arms[0].name, design="interleaved")


def _slots(exp: Experiment) -> dict[str, Counter[int]]:
    out: dict[str, Counter[int]] = {a.name: Counter() for a in exp.arms}
    for t in schedule(exp):
        out[t.arm][t.position] += 1
    return out


@pytest.mark.parametrize("seed", [13, 21, 23, 808, 901, 902])
def test_every_arm_starts_in_every_slot_equally_often(seed: int) -> None:
    exp = _interleaved(seed, 30)
    assert all(c == Counter({0: 10, 1: 10, 2: 10}) for c in _slots(exp).values())
    blocks: dict[int, dict[str, int]] = {}
    for t in schedule(exp):
        blocks.setdefault(t.block, {})[t.arm] = t.position
    assert sum(p["thp-again"] < p["thp"] for p in blocks.values()) == 15  # twin before base


def test_balanced_orders_stay_random_reproducible_and_extendable() -> None:
    exp = _interleaved(901, 30)
    orders = [tuple(t.arm for t in schedule(exp) if t.block == b) for b in range(30)]
    assert len(set(orders)) == 6 and orders[:6] != orders[6:12]  # each cycle drawn afresh
    assert schedule(exp) == schedule(_interleaved(901, 30))
    assert schedule(exp) != schedule(_interleaved(902, 30))
    # an until-verdict run adds blocks: the blocks already run keep their orders
    assert schedule(_interleaved(901, 42))[:90] == schedule(exp)


def test_two_arms_and_a_partial_cycle_stay_near_balanced() -> None:
    arms = (Arm("a", "4k"), Arm("b", "4k"))
    for seed in range(1, 11):
        firsts = Counter(t.arm for t in schedule(_interleaved(seed, 6, arms))
                         if t.position == 0)
        assert abs(firsts["a"] - firsts["b"]) <= 2  # 6 blocks: one cycle of 4, half another


def test_a_paired_runs_schedule_is_unchanged() -> None:
    exp = Experiment("p", REDIS_ARMS, {"kind": "fake"}, seed=901, blocks=30)
    rng, names, want = random.Random(901), [a.name for a in REDIS_ARMS], []
    for _ in range(30):
        o = names[:]
        rng.shuffle(o)
        want.append(o)
    assert [[t.arm for t in schedule(exp) if t.block == b] for b in range(30)] == want


@pytest.mark.parametrize("seed", range(5))
def test_window_rounds_lead_with_every_arm_equally_often(seed: int) -> None:
    rounds = order(3, 60, random.Random(seed))
    assert all(rounds[i][::-1] == rounds[i + 1] for i in range(0, 60, 2))
    assert Counter(r[0] for r in rounds[::2]) == Counter({0: 10, 1: 10, 2: 10})
    assert Counter(r[1] for r in rounds[::2]) == Counter({0: 10, 1: 10, 2: 10})
    assert len({tuple(r) for r in rounds[::2]}) > 3  # not one fixed rotation


@pytest.mark.server
@pytest.mark.tools
@pytest.mark.skipif(shutil.which("memcached") is None, reason="needs memcached")
def test_the_client_leads_its_blocks_with_every_server_equally_often(tmp_path: Path) -> None:
    cflags, libs = reqmix_build.flags()
    binary = tmp_path / "hugelab-reqmix"
    assert reqmix_build.compile_reqmix(reqmix_build.SOURCE_DIR, binary, cflags, libs) == ""
    port = rs.free_port()
    with rs.server(rs.memcached_argv(port), port):
        servers = (memcached_server("127.0.0.1", port),) * 3
        runs = []
        for seed in (902, 903, 902):
            s = ReqmixSettings(servers=servers, window_ops=2, windows=6 * 30, duration_s=None,
                               seed=seed)
            cp = subprocess.run(reqmix_argv(binary, s), capture_output=True, text=True,
                                timeout=60, check=True)
            runs.append(parse_output(cp.stdout))
    for r in runs:
        for pos in range(6):
            assert Counter(w.arm for w in r.windows if w.pos == pos) == \
                Counter({0: 10, 1: 10, 2: 10}), pos
    arms = [[w.arm for w in r.windows] for r in runs]
    assert arms[0] == arms[2] and arms[0] != arms[1]  # the seed's, and only the seed's
    assert all(sorted(r.connect_order) == [0, 1, 2] for r in runs)
    assert runs[0].connect_order == runs[2].connect_order


@pytest.mark.server
@pytest.mark.tools
@pytest.mark.skipif(shutil.which("memcached") is None, reason="needs memcached")
def test_the_client_connects_and_preloads_in_a_seeded_order_not_the_servers(
        tmp_path: Path) -> None:
    cflags, libs = reqmix_build.flags()
    binary = tmp_path / "hugelab-reqmix"
    assert reqmix_build.compile_reqmix(reqmix_build.SOURCE_DIR, binary, cflags, libs) == ""
    port = rs.free_port()
    with rs.server(rs.memcached_argv(port), port):
        orders: Counter[tuple[int, ...]] = Counter()
        for seed in range(1, 25):
            s = ReqmixSettings(servers=(memcached_server("127.0.0.1", port),) * 3,
                               window_ops=1, windows=6, duration_s=None, seed=seed,
                               keyspace=5, preload=True)
            cp = subprocess.run(reqmix_argv(binary, s), capture_output=True, text=True,
                                timeout=60, check=True)
            r = parse_output(cp.stdout)
            assert [x.preloaded for x in r.latency] == [5, 5, 5]
            orders[r.connect_order] += 1
    assert orders[(0, 1, 2)] < 24 and len(orders) >= 4  # not the --server order every time
