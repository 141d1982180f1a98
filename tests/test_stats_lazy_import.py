"""hugelab.stats loads a module on first use of one of its names: the in-guest entry points
(PostgreSQL's trial in hugelab's own guests) import the request client, which needs one small
statistics module, and under TCG importing every statistics module and scipy with it cost
seconds of every guest trial."""

from __future__ import annotations

import subprocess
import sys

import hugelab.stats as stats


def test_every_exported_name_resolves_to_its_modules_object() -> None:
    import importlib

    assert sorted(stats.__all__) == sorted(stats._WHERE)
    for name, (module, attr) in stats._WHERE.items():
        assert getattr(stats, name) is getattr(
            importlib.import_module(f"hugelab.stats.{module}"), attr), name


def test_an_unknown_name_is_an_attribute_error() -> None:
    try:
        stats.no_such_thing  # noqa: B018
    except AttributeError as exc:
        assert "no_such_thing" in str(exc)
    else:
        raise AssertionError("no AttributeError")


def test_the_in_guest_postgres_trial_imports_no_scipy() -> None:
    code = ("import sys, hugelab.workloads.postgres.inguest, hugelab.workloads.postgres.workload;"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'scipy' or "
            "m.startswith('hugelab.stats.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    loaded = eval(out)  # noqa: S307 - a list of module names this test printed
    assert not [m for m in loaded if m.startswith("scipy")], loaded
    assert "hugelab.stats.paired" not in loaded, loaded
