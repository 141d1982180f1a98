"""Redis's own THP switch, `disable-thp`, judged from its server process, read just before it
stopped: the kind's judge (Kind.judge) and its check."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hugelab.checks import CONTRADICTED, NOT_APPLICABLE, VERIFIED, Check
from hugelab.units import amount
from hugelab.workloads.serverjudge import judge_switch


def check_redis(disable_thp: bool, process_thp: str | None, server: dict[str, Any]) -> Check:
    """Redis's own disable-thp from its server process, read just before it stopped: `yes`
    switches THP off for itself (prctl, so THP_enabled 0) when the host's mode is `always`,
    after start-up (what it faulted in THP before stays THP: measured 6 MiB with Redis 7.0),
    and then its switch, not the arm's backing, decides its pages (`governs`);
    `no` keeps it (THP_enabled 1, unless the arm's process_thp wraps it)."""
    enabled = server.get("thp_enabled")
    huge = int(server.get("anon_huge_kb", 0))
    if enabled is None:
        return Check(NOT_APPLICABLE, "this kernel does not report THP_enabled per process "
                                     "(Linux 6.0+)", "app")
    if disable_thp:
        if enabled == 0:
            return Check(VERIFIED, "disable-thp yes: redis-server switched THP off for itself "
                                   f"(THP_enabled 0; {amount(huge)} faulted in THP before "
                                   "it did stays THP)", "app", governs=True)
        if huge:
            return Check(CONTRADICTED, f"disable-thp yes, yet redis-server has {amount(huge)} "
                                       "in THP", "app")
        return Check(NOT_APPLICABLE, "disable-thp yes: redis-server kept THP_enabled 1 (it "
                                     "switches THP off only under host THP always) and has no "
                                     "THP", "app")
    if enabled == 0 and process_thp != "never":
        return Check(CONTRADICTED, "disable-thp no, yet redis-server runs with THP_enabled 0",
                     "app")
    return Check(VERIFIED, f"disable-thp no: redis-server kept THP "
                           f"(THP_enabled {enabled}, {amount(huge)} in THP)", "app")


def judge(evidence: Mapping[str, Any]) -> Check | None:
    """The app layer from what a trial recorded: Redis's switch (evidence["redis"]) against its
    server's own process, read just before it stopped (evidence["server"])."""
    return judge_switch(evidence, "redis", "redis-server's memory was not read (it ended "
                        "first, or runs where hugelab cannot see)", lambda redis, server:
                        check_redis(bool(redis.get("disable_thp")), redis.get("process_thp"),
                                    server))
