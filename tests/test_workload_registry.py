"""registry: experiment-file tables -> workload dataclasses, and the errors users see."""

from __future__ import annotations

import sys

import pytest

from hugelab.errors import ExperimentError
from hugelab.workloads.command import CommandWorkload
from hugelab.workloads.iperf3 import IPerf3
from hugelab.workloads.make_build import MakeBuild
from hugelab.workloads.redis import RedisBenchmark
from hugelab.workloads.registry import build_workload, known_kinds
from hugelab.workloads.stressng import StressNg
from hugelab.workloads.sysbench import SysbenchMemory


def test_every_kind_builds():
    assert isinstance(build_workload("sysbench", {"block_size": "256M", "access_mode": "rnd",
                                                  "hugetlb": True, "threads": 2}), SysbenchMemory)
    sb = build_workload("sysbench", {"block_size": "256M"})
    assert isinstance(sb, SysbenchMemory) and sb.block_size == 256 << 20
    assert build_workload("stress-ng", {"stressor": "mlock", "workers": 4}) == StressNg("mlock", 4)
    assert build_workload("iperf3", {"reverse": True, "duration_s": 2}) == IPerf3(2, True)
    r = build_workload("redis", {"tests": ["set", "get", "incr"], "requests": 5000})
    assert isinstance(r, RedisBenchmark) and r.tests == ("set", "get", "incr")
    assert isinstance(build_workload("build", {"source_dir": "/src", "jobs": 4}), MakeBuild)
    c = build_workload("command", {"argv": ["true"], "better": "higher", "timeout_s": 5})
    assert isinstance(c, CommandWorkload) and c.argv == ("true",) and c.timeout_s == 5.0
    for kind in known_kinds():
        assert build_workload(kind, {"source_dir": "/s"} if kind == "build" else
                              {"argv": ["true"]} if kind == "command" else {}).kind == kind


def test_unknown_kind():
    with pytest.raises(ExperimentError) as ei:
        build_workload("sysbnch", {})
    assert "unknown workload kind 'sysbnch'; known kinds: build, command" in ei.value.message
    assert ei.value.hint == "did you mean 'sysbench'?"


def test_unknown_key_lists_known_keys():
    with pytest.raises(ExperimentError) as ei:
        build_workload("sysbench", {"blok_size": "1M"})
    assert ei.value.message.startswith(
        "workload 'sysbench': unknown key 'blok_size'; known keys: access_mode, binary, "
        "block_size,")
    assert ei.value.hint == "did you mean 'block_size'?"
    with pytest.raises(ExperimentError, match="unknown key 'server'"):
        build_workload("iperf3", {"server": "x"})
    with pytest.raises(ExperimentError, match="unknown key 'kind'"):
        build_workload("iperf3", {"kind": "iperf3"})


@pytest.mark.parametrize("kind,params,match", [
    ("sysbench", {"threads": "4"}, "key 'threads' must be an integer, got str '4'"),
    ("sysbench", {"threads": True}, "key 'threads' must be an integer, got bool True"),
    ("sysbench", {"scope": "globl"}, "key 'scope' must be one of 'global', 'local'"),
    ("sysbench", {"hugetlb": "on"}, "key 'hugetlb' must be true or false"),
    ("sysbench", {"block_size": 1.5}, "key 'block_size' must be an integer or a string"),
    ("redis", {"tests": "get"}, "key 'tests' must be a list of strings"),
    ("redis", {"tests": ["get", 3]}, "key 'tests' must be a list of strings"),
    ("command", {"argv": "ls -l"}, "key 'argv' must be a list of strings"),
])
def test_bad_types(kind, params, match):
    with pytest.raises(ExperimentError, match=match):
        build_workload(kind, params)


@pytest.mark.parametrize("kind,params,match", [
    ("sysbench", {"block_size": "2X"}, "^workload 'sysbench': block_size: invalid size"),
    ("stress-ng", {"stressor": "cpu"}, "^workload 'stress-ng': unknown stressor 'cpu'"),
    ("build", {}, "^workload 'build': source_dir is required"),
    ("command", {"argv": ["x"], "metric": "json"}, "^workload 'command': metric 'json' needs"),
])
def test_constructor_checks_carry_the_workload_name(kind, params, match):
    with pytest.raises(ExperimentError, match=match):
        build_workload(kind, params)


def test_hugelab_mem_with_size_string():
    w = build_workload("hugelab-mem", {"workload": "random", "size": "2G", "threads": 2,
                                       "duration_s": 3, "seed": 7})
    assert (w.workload, w.size_bytes, w.threads, w.duration_s, w.seed) == (  # type: ignore[attr-defined]
        "random", 2 << 30, 2, 3.0, 7)
    assert isinstance(getattr(w, "duration_s"), float)  # noqa: B009
    with pytest.raises(ExperimentError, match="size or size_bytes, not both"):
        build_workload("hugelab-mem", {"size": "2G", "size_bytes": 5})
    with pytest.raises(ExperimentError, match="known keys: duration, size, duration_s"):
        build_workload("hugelab-mem", {"sise": "2G"})


def test_a_kind_whose_module_is_missing_is_named(monkeypatch):
    from hugelab.workloads import registry
    monkeypatch.setattr(registry, "_loaded", {})
    monkeypatch.setitem(sys.modules, "hugelab.workloads.hugelab_mem", None)
    with pytest.raises(ExperimentError, match="hugelab.workloads.hugelab_mem is not available"):
        build_workload("hugelab-mem", {})


# places outside a kind's own module where its name is a string for another reason
NAMED_ELSEWHERE = {
    ("experiment/model.py", "hugelab-mem"): "the built-in default experiment's kind",
    ("workloads/build.py", "hugelab-mem"): "the C program it builds, of the same name",
    ("report/fleet/__init__.py", "build"): "a function named build",
    ("cli/main.py", "command"): "argparse's dest for the command name",
    ("vm/domains/imagerecipe.py", "sysbench"): "Debian packages the demo image installs",
    ("vm/domains/imagerecipe.py", "stress-ng"): "Debian packages the demo image installs",
    ("vm/domains/imagerecipe.py", "memcached"): "Debian packages the demo image installs",
    ("store/importers/common.py", "*"): "outside tools' output formats, named after the tools",
    ("store/importers/__init__.py", "*"): "outside tools' output formats",
    ("store/importers/from_sysbench.py", "sysbench"): "the tool whose output it imports",
    ("store/importers/from_stressng.py", "stress-ng"): "the tool whose output it imports",
    ("store/importers/from_iperf3.py", "iperf3"): "the tool whose output it imports",
    ("workloads/mariadb/workload.py", "sysbench"): "the sysbench program, its load generator",
    ("workloads/mariadb/oltp.py", "sysbench"): "the sysbench program, its load generator",
    ("workloads/mariadb/evidence.py", "sysbench"): "the sysbench program, its load generator",
    ("errors.py", "command"): "the word, for a failed program without a name",
}


def test_every_kind_declares_itself_and_nothing_else_names_it():
    """Each registered kind's declaration is complete, and no module of hugelab/ outside the
    kind's own module (or package) and the registry's one line names it (NAMED_ELSEWHERE says
    where a kind's name is a string for another reason)."""
    from pathlib import Path

    from hugelab.workloads import registry
    root = Path(registry.__file__).resolve().parents[1]
    found = []
    for name, declared in registry.kinds().items():
        assert declared.name == name and declared.summary and declared.where
        own = Path(sys.modules[declared.workload.__module__].__file__ or "").resolve()
        home = own.parent if own.parent.name != "workloads" else own
        for path in root.rglob("*.py"):
            rel = str(path.relative_to(root))
            if path == Path(registry.__file__).resolve() or path.is_relative_to(home) or \
                    (rel, name) in NAMED_ELSEWHERE or (rel, "*") in NAMED_ELSEWHERE:
                continue
            if f'"{name}"' in path.read_text():
                found.append(f"{rel} names kind {name!r}")
    assert not found, "\n".join(found)


def test_hugelab_mem_real_module_if_present():
    mem = pytest.importorskip("hugelab.workloads.hugelab_mem")
    w = build_workload("hugelab-mem", {"size": "64M", "workload": "chase"})
    assert isinstance(w, mem.HugelabMem) and w.size_bytes == 64 << 20
    with pytest.raises(ExperimentError, match="workload 'hugelab-mem': key 'size': invalid size"):
        build_workload("hugelab-mem", {"size": "lots"})


