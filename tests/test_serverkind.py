"""The server kinds' one life cycle (hugelab.workloads.serverkind) and its wiring, without
starting a server: a scripted server side and client target stand in for hugelab's own guest
and the load generator. The real runs are the kinds' own tests (test_workload_redis.py,
test_workload_memcached.py) and, in a real guest, tests/test_vm_net.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from hugelab.checks import VERIFIED
from hugelab.workloads.base import ExecResult, Place
from hugelab.workloads.memcached import MemcachedBenchmark
from hugelab.workloads.memcached import judge as memcached_judge
from hugelab.workloads.redis import RedisBenchmark
from hugelab.workloads.redis import judge as redis_judge
from hugelab.workloads.servermem import MARK

DATA = Path(__file__).parent / "data"
CSV = (DATA / "redis-benchmark-7.0.15-set-get.csv").read_text()
MEMCSLAP = ("Time to get           80000 keys by    4 threads:     1.494 seconds.\n"
            "Time total:                                           2.407 seconds.\n")
# what servermem.watch prints as a watched server ends: its last THP picture
PICTURE = {"pid": 4242, "thp_enabled": 1, "anon_kb": 204800, "anon_huge_kb": 151552,
           "rss_kb": 210000, "madvised_kb": 0, "madvised_thp_kb": 0}


class Handle:
    """A server this process cannot see (no proc, no memory()): what it printed comes back
    from stop(), as GuestServerHandle's does."""

    client_port = 40000

    def __init__(self, output: str) -> None:
        self.output = output

    def stop(self) -> str:
        return self.output


class Side:
    """A ServerSide recording the argv it was asked to start; `place` as GuestServer's."""

    def __init__(self, place: Place | None) -> None:
        if place is not None:
            self.place = place
        self.argv: list[str] = []

    def start(self, argv_for_port, tool):
        self.argv = argv_for_port(6379)
        watched = self.argv[1:3] == [str(Path(sys.modules["hugelab.workloads.servermem"]
                                              .__file__ or "")), "watch"]
        return Handle(f"{tool} says hello\n" + (MARK + json.dumps(PICTURE) if watched else ""))


class Client:
    """The load generator's host: redis-benchmark's CSV, memcslap's times, versions."""

    name = "native"

    def exec(self, argv, *, timeout=None):
        out = {"redis-benchmark": "redis-benchmark 7.0.15\n" if "--version" in argv else CSV,
               "memcslap": MEMCSLAP}.get(Path(argv[0]).name, "")
        return ExecResult(list(argv), 0, out, "", 0.5)


def kinds() -> list[tuple[Any, Any]]:
    side = Side(Place.GUEST)
    return [(RedisBenchmark(app=(("disable-thp", "no"),), preload=False, server=side),
             redis_judge),
            # `-V` runs on the host: Python stands in for memcached (no program beyond it)
            (MemcachedBenchmark(server=side, server_binary=sys.executable), memcached_judge)]


@pytest.mark.parametrize("index", [0, 1], ids=["redis", "memcached"])
def test_a_server_in_hugelab_own_guest_reports_its_own_memory(index):
    """In hugelab's own guest the host cannot read the server's /proc: every kind's server
    runs watched from inside and its picture comes back in its output, so its own switch is
    judged there (issue 37: Redis's disable-thp read "not applicable" in own guests, since
    only memcached was watched)."""
    workload, judge = kinds()[index]
    side = workload.server
    result = workload.run(Client(), "thp")
    assert side.argv[:4] == [sys.executable, side.argv[1], "watch", "--"], side.argv
    assert side.argv[4] == workload.server_binary
    assert result.evidence["server"] == PICTURE
    check = judge(result.evidence)
    assert check is not None and check.status == VERIFIED, check


def test_a_server_this_process_sees_is_not_watched():
    """A side with no place of its own (the host's, a test's) starts the server's own argv:
    its memory is read from its process directly."""
    side = Side(None)
    w = RedisBenchmark(app=(("disable-thp", "no"),), preload=False, server=side)  # type: ignore[arg-type]
    w.run(Client(), "thp")
    assert side.argv[0] == "redis-server" and "watch" not in side.argv


def test_every_server_kind_supplies_its_own_parts():
    """What the base leaves to a kind, each kind over it supplies (the base's own are
    placeholders)."""
    from hugelab.workloads.serverkind import ServerKind
    own = ("server_argv", "load", "loaded", "describe", "reqmix_server")
    for cls in (RedisBenchmark, MemcachedBenchmark):
        assert issubclass(cls, ServerKind)
        missing = [m for m in own if getattr(cls, m) is getattr(ServerKind, m)]
        assert not missing, f"{cls.__name__} lacks {missing}"
        assert cls.tool and cls.domain.port
