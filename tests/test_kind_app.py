"""An arm's `app` settings are held to its kind's declared keys by `Kind.check_app`, called by
the registry for every kind that declares them (issue 37): no kind validates `app` on its own."""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path
from typing import Any

import pytest

from hugelab.errors import ExperimentError
from hugelab.experiment import Arm
from hugelab.workloads import kind as kindmod
from hugelab.workloads.registry import build_workload, kinds, with_arm

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def app_kinds() -> list[str]:
    """The kinds that declare their app keys (`KIND = Kind(..., app=...)`), from the registry."""
    return sorted(n for n, k in kinds().items() if k.app is not None)


def takes_app(name: str) -> bool:
    return "app" in {f.name for f in dataclasses.fields(kinds()[name].workload)}


def settings(name: str) -> dict[str, Any]:
    """A kind's workload built from no settings, else from its first example's [workload]
    (a kind with a required key, the JVM's heap)."""
    try:
        build_workload(name, {})
        return {}
    except ExperimentError:
        for f in sorted(EXAMPLES.glob("*.toml")):
            table = tomllib.loads(f.read_text()).get("workload", {})
            if table.get("kind") == name:
                return {k: v for k, v in table.items() if k != "kind"}
        raise


def test_every_kind_with_app_declares_its_keys_or_leaves_them_open():
    declared = app_kinds()
    assert {"memcached", "redis", "jvm", "varnish"} <= set(declared)  # the list is not empty
    assert all(takes_app(n) for n in declared), "a kind declares app keys it has no field for"


@pytest.mark.parametrize("name", app_kinds())
def test_check_app_is_what_refuses_an_arms_unknown_setting(name, monkeypatch):
    """Every kind declaring app keys has them checked by Kind.check_app: an arm's unknown
    setting is refused there, and by nothing else first (a kind validating `app` on its own,
    or not at all, fails here)."""
    wl = build_workload(name, settings(name))
    calls = []
    real = kindmod.check_app

    def spy(*args):
        calls.append(args[0])
        return real(*args)
    monkeypatch.setattr("hugelab.workloads.registry.check_app", spy)
    with pytest.raises(ExperimentError) as exc:
        with_arm(wl, Arm("x", "4k", app=(("no_such_switch", True),)))
    assert calls == [name]
    assert exc.value.message == (f"arm 'x': workload '{name}': unknown app setting "
                                 f"'no_such_switch'; known: {', '.join(kinds()[name].app or {})}")


def test_redis_disable_thp_values_are_the_declared_ones():
    wl = build_workload("redis", {})
    # in the experiment file's words (TOML: true, "yes"), not Python's (True, 'yes')
    with pytest.raises(ExperimentError, match='app disable-thp must be one of "yes", "no", '
                                              'true, false, got "maybe"'):
        with_arm(wl, Arm("x", "4k", app=(("disable-thp", "maybe"),)))
    assert with_arm(wl, Arm("x", "4k", app=(("disable-thp", True),))).disable_thp


def test_a_list_setting_is_taken_where_the_kind_declares_a_tuple():
    wl = with_arm(build_workload("jvm", settings("jvm")),
                  Arm("x", "4k", app=(("options", ["-XX:+UseNUMA"]),)))
    assert dict(wl.app)["options"] == ("-XX:+UseNUMA",)


def test_a_setting_of_the_wrong_type_is_said_in_the_files_words():
    wl = build_workload("memcached", {})
    with pytest.raises(ExperimentError, match='app large_pages must be true or false, got "yes"'):
        with_arm(wl, Arm("x", "thp", app=(("large_pages", "yes"),)))
    with pytest.raises(ExperimentError, match="app threads must be an integer, got true"):
        with_arm(wl, Arm("x", "thp", app=(("threads", True),)))
