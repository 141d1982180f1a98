"""A server kind's app evidence rule, written once: the arm's own switch (as the kind's
`describe` recorded it) judged against its server's own memory, read just before it stopped
(evidence["server"], hugelab.workloads.servermem). A kind's `Kind.judge` calls `judge_switch`
with its own rule; `check_madvised` is the rule of a switch that madvises memory for THP
(memcached -L, Varnish's jemalloc thp)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from hugelab.checks import CONTRADICTED, NOT_APPLICABLE, VERIFIED, Check
from hugelab.units import amount


def check_madvised(who: str, on: bool, server: Mapping[str, Any], *, least_kb: int = 0,
                   least: str = "", of_thp: str = "", why_none: str = "") -> Check:
    """A switch that madvises a server's memory for THP (MADV_HUGEPAGE), `who` in words,
    judged from the server's own mappings: on, it madvised (at least `least_kb`, `least` in
    words) and that is in THP; off, it madvised nothing."""
    advised, huge, total = (int(server.get(k, 0)) for k in
                            ("madvised_kb", "madvised_thp_kb", "anon_huge_kb"))
    if not on:
        if advised:
            return Check(CONTRADICTED, f"{who}, yet {amount(advised)} of its memory is "
                                       f"madvised{of_thp}", "app")
        return Check(VERIFIED, f"{who} madvised nothing ({amount(total)} in THP by the host's "
                               "mode)", "app")
    if advised < least_kb:
        return Check(CONTRADICTED, f"{who} madvised {amount(advised)}, less than {least}", "app")
    if not huge:
        return Check(CONTRADICTED, f"{who} madvised {amount(advised)} but none of it is in "
                                   f"THP{why_none}", "app")
    return Check(VERIFIED, f"{who}: {amount(huge)} of its {amount(advised)} madvised memory in "
                           "THP", "app")


def judge_switch(evidence: Mapping[str, Any], key: str, unread: str,
                 check: Callable[[dict[str, Any], dict[str, Any]], Check]) -> Check | None:
    """A kind's app evidence rule: the arm's own switch as `describe` recorded it
    (evidence[key]; None when it recorded none) judged by `check` against its server's own
    memory (evidence["server"]), or not applicable, `unread` saying why, where that was not
    read."""
    switch = evidence.get(key)
    if not isinstance(switch, dict):
        return None
    server = evidence.get("server")
    if not server:
        return Check(NOT_APPLICABLE, unread, "app")
    return check(switch, server)
