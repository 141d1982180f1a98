"""The quick tier's guard (tests/tierguard.py): what a test without machine markers may start."""

from __future__ import annotations

import shutil
import sys

import pytest

from tests.tierguard import Guard, TierViolation, allowed, program_of


def test_the_program_is_found_through_setpriv():
    assert program_of(["/usr/bin/setpriv", "--pdeathsig", "KILL", "--", "/x/hugelab-mem", "-w"]) \
        == "hugelab-mem"
    assert program_of(["setpriv", "--reuid", "postgres", "/usr/lib/postgresql/15/bin/initdb"]) \
        == "initdb"


@pytest.mark.parametrize("argv", [[sys.executable, "-c", "pass"], ["python3", "-V"],
                                  ["setpriv", "--pdeathsig", "KILL", "--", "sleep", "1"],
                                  ["no-such-program-anywhere"]])
def test_python_coreutils_and_missing_programs_are_quick(argv):
    assert allowed(argv)


def test_a_copy_the_test_made_in_tmp_is_quick(tmp_path):
    exe = tmp_path / "qemu-system-fake"
    shutil.copy("/bin/sleep", exe)
    assert allowed([str(exe), "1"])


@pytest.mark.parametrize("program", ["cc", "perf", "chromium", "postgres", "qemu-img", "ssh"])
def test_compilers_servers_and_tools_are_not(program):
    path = shutil.which(program) or f"/usr/bin/{program}"
    if shutil.which(path) is None:
        pytest.skip(f"{program} is not installed: nothing to start")
    assert not allowed([path, "--version"])
    assert not allowed(["setpriv", "--pdeathsig", "KILL", "--", path])


def test_a_violation_names_the_test_and_the_marker_to_add():
    guard = Guard()
    guard.nodeid = "tests/test_x.py::test_y"
    with pytest.raises(TierViolation, match="test_y has no machine marker but starts 'cc'.*tools"):
        guard.check(["/usr/bin/cc", "-c", "x.c"])
    assert guard.violation is not None
