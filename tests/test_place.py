"""A workload picks where it runs from a typed place (issue 37), not by comparing a target's
name with "native" in each kind."""

from __future__ import annotations

import pathlib
import re

from hugelab.vm.domains.remote import RemoteTarget
from hugelab.workloads.base import Place, place_of
from hugelab.workloads.guestside import in_domain


class Named:
    def __init__(self, name: str) -> None:
        self.name = name


def test_the_place_of_each_kind_of_target():
    assert place_of(Named("native")) is Place.NATIVE
    assert place_of(Named("vm0")) is Place.GUEST
    assert RemoteTarget.place == "domain"
    dom = Named("vm0")
    dom.place = "domain"  # type: ignore[attr-defined]
    assert place_of(dom) is Place.DOMAIN and in_domain(dom) and not in_domain(Named("vm0"))


def test_no_workload_compares_a_target_name_with_native():
    root = pathlib.Path(__file__).resolve().parents[1] / "hugelab" / "workloads"
    found = [str(p) for p in root.rglob("*.py") if p.name != "base.py"
             and re.search(r"""name["'], ["']\w*["']\) [!=]= ["']native""", p.read_text())]
    assert found == []
