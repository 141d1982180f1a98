"""An arm's `app` settings are held to its kind's declared keys by `Kind.check_app`, called by
the registry for every kind that declares them (issue 37): no kind validates `app` on its own."""

from __future__ import annotations

import dataclasses

import pytest

from hugelab.errors import ExperimentError
from hugelab.experiment import Arm
from hugelab.workloads import kind as kindmod
from hugelab.workloads.registry import build_workload, kinds, with_arm

DEFAULTS = {"memcached": {}, "redis": {}, "jvm": {"heap": "256M"}, "varnish": {}}


def test_every_kind_with_app_declares_its_keys_or_leaves_them_open():
    with_app = {n for n, k in kinds().items()
                if "app" in {f.name for f in dataclasses.fields(k.workload)}}
    assert {"memcached", "redis", "jvm", "varnish"} <= with_app
    declared = {n for n, k in kinds().items() if k.app is not None}
    assert declared == {"memcached", "redis", "jvm", "varnish"}  # postgres, mariadb: server settings


@pytest.mark.parametrize("name", sorted(DEFAULTS))
def test_check_app_is_what_refuses_an_arms_unknown_setting(name, monkeypatch):
    wl = build_workload(name, DEFAULTS[name])
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
    with pytest.raises(ExperimentError, match="app disable-thp must be one of 'yes', 'no', "
                                              "True, False, got 'maybe'"):
        with_arm(wl, Arm("x", "4k", app=(("disable-thp", "maybe"),)))
    assert with_arm(wl, Arm("x", "4k", app=(("disable-thp", True),))).disable_thp


def test_a_list_setting_is_taken_where_the_kind_declares_a_tuple():
    wl = with_arm(build_workload("jvm", {"heap": "256M"}),
                  Arm("x", "4k", app=(("options", ["-XX:+UseNUMA"]),)))
    assert dict(wl.app)["options"] == ("-XX:+UseNUMA",)
