"""`run --dry-run` says what the run builds on the host first (PostgreSQL's template, a dump
restored): only for the arms that run on the host. An experiment whose every arm runs in a
user's own domain restores the dump in the guest, trial by trial, and builds nothing here; the
dry run said it would restore it into a host template first (issue 40's DBA journey)."""

from __future__ import annotations

from dataclasses import dataclass

from hugelab.planning.dryrun import builds
from hugelab.workloads.preview import Build


@dataclass
class _Pg:
    """A workload as PostgreSQL's is: the experiment's own builds a template; an arm in a
    domain builds nothing on the host."""

    domain_arm: bool = False

    def builds(self) -> list[Build]:
        if self.domain_arm:
            return []
        return [Build("PostgreSQL 15 template: initdb, shop.dump restored", "restore_custom",
                      1e6, False)]


def test_every_arm_in_a_domain_builds_nothing_on_the_host():
    per_arm = {"off": _Pg(domain_arm=True), "on": _Pg(domain_arm=True)}
    assert builds(_Pg(), per_arm, ["off", "on"]) == []  # type: ignore[arg-type]


def test_a_host_arm_beside_a_domain_arm_still_builds():
    per_arm = {"guest": _Pg(domain_arm=True)}  # "native" has no workload of its own
    said = builds(_Pg(), per_arm, ["native", "guest"])  # type: ignore[arg-type]
    assert [b["what"] for b in said] == ["PostgreSQL 15 template: initdb, shop.dump restored"]
    assert said[0]["seconds"] > 0 and said[0]["cached"] is False
