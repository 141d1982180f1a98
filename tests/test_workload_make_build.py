"""build: `make clean` + timed `make -jN` of a copied C tree, with real cc compiles.

The tree is generated here: ~50 translation units, a shared header and a real Makefile."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from hugelab.errors import ExperimentError, ToolMissingError, WorkloadError
from hugelab.trial.native import NativeTarget
from hugelab.workloads.make_build import MakeBuild
from tests.helpers import make_tree

pytestmark = pytest.mark.beside  # lock-free tests here run beside the machine lane (docs/testing.md)

needs_cc = pytest.mark.skipif(shutil.which("cc") is None or shutil.which("make") is None,
                              reason="needs cc and make (apt-get install gcc make)")


def test_argv_and_validation():
    w = MakeBuild(source_dir="/src/tree/", jobs=4, make_target="app")
    assert w.copy_argv("/dev/shm/x") == ["cp", "-a", "--", "/src/tree/.", "/dev/shm/x"]
    assert w.clean_argv("/d") == ["make", "-C", "/d", "clean"]
    assert w.build_argv("/d") == ["make", "-C", "/d", "-j4", "app"]
    assert MakeBuild(source_dir="/s").build_argv("/d") == ["make", "-C", "/d", "-j2"]
    with pytest.raises(ExperimentError, match="source_dir"):
        MakeBuild()
    with pytest.raises(ExperimentError, match="looks like an option"):
        MakeBuild(source_dir="/s", make_target="-f/etc/passwd")


@pytest.mark.tools
@needs_cc
def test_builds_a_copy_of_a_generated_c_tree(tmp_path):
    src = make_tree(tmp_path / "tree")
    # a stale object in the source tree: `make clean` in the copy must remove it
    (src / "src" / "unit00.o").write_text("not an object file")
    scratch = "/dev/shm" if os.path.isdir("/dev/shm") else str(tmp_path)
    w = MakeBuild(source_dir=str(src), jobs=2, scratch_dir=scratch)
    res = w.run(NativeTarget(), "4k")
    assert res.primary == "wall_s" and res.better == "lower" and res.unit == "s"
    assert res.value > 0
    # make's rusage covers its cc children: 50 real compiles take CPU time and fault pages
    assert res.metrics["user_s"] + res.metrics["sys_s"] > 0.2
    assert res.metrics["minflt"] > 10_000
    assert res.info["version"] and res.info["cc"]
    if scratch == "/dev/shm":
        assert res.info["scratch_fs"] == "tmpfs"
    assert not (src / "app").exists(), "the source tree itself is not built in"
    assert (src / "src" / "unit00.o").read_text() == "not an object file"
    assert not list(Path(scratch).glob("hugelab-build.*")), "scratch copy removed"


@pytest.mark.tools
@needs_cc
def test_compile_error_is_workload_error_with_compiler_output(tmp_path):
    src = make_tree(tmp_path / "tree", units=3, broken=True)
    with pytest.raises(WorkloadError) as ei:
        MakeBuild(source_dir=str(src), scratch_dir=str(tmp_path)).run(NativeTarget(), "4k")
    assert "main.c" in ei.value.message and "error" in ei.value.message
    assert "expected expression" in ei.value.stderr  # type: ignore[attr-defined]


def test_missing_make_names_the_package(tmp_path):
    src = tmp_path / "tree"
    src.mkdir()
    (src / "Makefile").write_text("all:\n\ttrue\n")
    with pytest.raises(ToolMissingError) as ei:
        MakeBuild(source_dir=str(src), scratch_dir=str(tmp_path),
                  make_binary="/nonexistent/make").run(NativeTarget(), "4k")
    assert ei.value.package == "make"
    assert not list(tmp_path.glob("hugelab-build.*")), "scratch copy removed"
