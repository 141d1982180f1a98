"""An arm's application switches (`app`) and its processes' THP (`process_thp`): parsing,
identity, factors, and how they reach the arm's own workload object."""

from __future__ import annotations

import dataclasses
import tomllib

import pytest

from hugelab.errors import ExperimentError
from hugelab.experiment import Experiment
from hugelab.experiment.parse import parse_experiment
from hugelab.workloads.registry import build_for

FLAT = """
name = "x"
[workload]
kind = "hugelab-mem"
[[arms]]
name = "a"
backing = "4k"
[[arms]]
name = "b"
backing = "thp"
"""


def parse(text: str) -> Experiment:
    return parse_experiment(tomllib.loads(text), text)


def test_an_arm_without_app_keeps_its_identity():
    """Experiments written before `app` existed keep their run key (stores resume)."""
    exp = parse(FLAT)
    d = exp.to_dict()
    assert all("app" not in a and "process_thp" not in a for a in d["arms"])
    assert Experiment.from_dict(d).key() == exp.key()


def test_app_and_process_thp_parse_and_round_trip():
    exp = parse(FLAT.replace('backing = "thp"', 'backing = "thp"\nprocess_thp = "never"\n'
                             'app = { huge_pages = "on", options = ["-Xmx1g", "-XX:+UseG1GC"], '
                             'workers = 4 }'))
    b = exp.arms[1]
    assert b.process_thp == "never"
    assert b.app == (("huge_pages", "on"), ("options", ("-Xmx1g", "-XX:+UseG1GC")),
                     ("workers", 4))
    back = Experiment.from_dict(exp.to_dict())
    assert back == exp and back.key() == exp.key()
    assert exp.key() != parse(FLAT).key()


@pytest.mark.parametrize("line, words", [
    ('process_thp = "always"', "process_thp = 'always' is not one of: never, madvise"),
    ('app = "on"', "app must be a table"),
    ('app = { huge_pages = { x = 1 } }', "app huge_pages must be a string"),
    ('app = { "bad key" = 1 }', "is not a setting name"),
])
def test_bad_app_settings_say_what_is_wrong(line, words):
    with pytest.raises(ExperimentError) as exc:
        parse(FLAT.replace('backing = "thp"', f'backing = "thp"\n{line}'))
    assert words in exc.value.message
    assert exc.value.message.startswith("line ")


def test_factors_sweep_app_settings_and_process_thp():
    exp = parse("""
name = "f"
[workload]
kind = "hugelab-mem"
[base]
backing = "4k"
[factors]
app.huge_pages = ["off", "on"]
process_thp = ["never", "madvise"]
""")
    names = [a.name for a in exp.arms]
    assert names[0] == "app.huge_pages=off,process_thp=never"
    cell = next(a for a in exp.arms if a.name == "app.huge_pages=on,process_thp=madvise")
    assert cell.app == (("huge_pages", "on"),) and cell.process_thp == "madvise"


def test_named_levels_set_app_tables():
    exp = parse("""
name = "f"
[workload]
kind = "hugelab-mem"
[factors.pg]
off = { backing = "4k", app = { huge_pages = "off" } }
on = { backing = "hugetlb-2M", app = { huge_pages = "on", huge_page_size = "2MB" } }
""")
    on = next(a for a in exp.arms if a.name == "pg=on")
    assert on.backing == "hugetlb-2M"
    assert on.app == (("huge_page_size", "2MB"), ("huge_pages", "on"))


def test_a_factor_cannot_sweep_a_nested_app_key():
    with pytest.raises(ExperimentError) as exc:
        parse("""
name = "f"
[workload]
kind = "hugelab-mem"
[factors]
"app.a.b" = [1, 2]
""")
    assert "not an arm setting a factor can sweep" in exc.value.message


def test_a_workload_without_switches_refuses_them_by_name():
    exp = parse(FLAT.replace('backing = "thp"', 'backing = "thp"\napp = { huge_pages = "on" }'))
    with pytest.raises(ExperimentError) as exc:
        build_for(exp)
    assert exc.value.message == ("arm 'b': workload 'hugelab-mem' takes no application "
                                 "settings (app)")
    assert "postgres" in (exc.value.hint or "")
    exp = parse(FLAT.replace('backing = "thp"', 'backing = "thp"\nprocess_thp = "never"'))
    with pytest.raises(ExperimentError, match="takes no per-process THP mode"):
        build_for(exp)


@dataclasses.dataclass(frozen=True)
class _Switched:
    """A stand-in kind with both fields, validating like a real one."""

    size: int = 1
    app: tuple[tuple[str, object], ...] = ()
    process_thp: str | None = None
    kind: str = dataclasses.field(default="switched", init=False)

    def __post_init__(self) -> None:
        if any(k != "huge_pages" for k, _ in self.app):
            raise ExperimentError("switched: unknown setting " + self.app[0][0])


def test_each_arm_gets_its_own_object_with_its_switches(monkeypatch):
    from hugelab.workloads import registry
    from hugelab.workloads.kind import Kind
    registry.kinds()
    monkeypatch.setitem(registry._loaded, "switched",
                        Kind(name="switched", workload=_Switched, summary="a test kind"))
    exp = parse(FLAT.replace('kind = "hugelab-mem"', 'kind = "switched"')
                .replace('backing = "thp"', 'backing = "4k"\nprocess_thp = "never"\n'
                         'app = { huge_pages = "on" }'))
    default, per_arm = build_for(exp)
    assert "a" not in per_arm and default == _Switched()
    assert per_arm["b"] == _Switched(app=(("huge_pages", "on"),), process_thp="never")
    bad = parse(FLAT.replace('kind = "hugelab-mem"', 'kind = "switched"')
                .replace('backing = "thp"', 'backing = "4k"\napp = { shared_buffers = 1 }'))
    with pytest.raises(ExperimentError) as exc:
        build_for(bad)
    assert exc.value.message == "arm 'b': workload 'switched': unknown setting shared_buffers"
