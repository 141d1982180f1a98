"""hugelab.proc is the one way hugelab runs a process: nothing else under hugelab/ starts one
(subprocess's functions, os.exec*, os.spawn*, os.system, os.fork), except what the allow-list
below names and says why. subprocess's constants and types (DEVNULL, STDOUT, PIPE,
TimeoutExpired, Popen as a type) are no process of their own and may be used anywhere."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hugelab import proc
from hugelab.errors import CommandError, ToolMissingError

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "hugelab"

STARTERS = {
    "subprocess": {"run", "Popen", "call", "check_call", "check_output", "getoutput",
                   "getstatusoutput"},
    "os": {"system", "popen", "fork", "forkpty", "posix_spawn", "posix_spawnp",
           *(f"exec{s}" for s in ("l", "le", "lp", "lpe", "v", "ve", "vp", "vpe")),
           *(f"spawn{s}" for s in ("l", "le", "lp", "lpe", "v", "ve", "vp", "vpe"))},
    "asyncio": {"create_subprocess_exec", "create_subprocess_shell"},
    "pty": {"spawn", "fork"},
}

# Files that may start processes on their own, and why (keep this list short).
ALLOWED = {
    # the one way: run, run_bytes, start, spawn, become
    "hugelab/proc.py",
    # runs inside hugelab's guests, where only the standard library exists (no hugelab to
    # import): it runs each exec request's argv with subprocess.Popen itself
    "hugelab/vm/own/agent.py",
}


def starts(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, name) of every process start in a module: `subprocess.run(...)`,
    `os.execv(...)`, and names imported from those modules (`from subprocess import run`)."""
    found = []
    imported = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in STARTERS:
            for a in node.names:
                if a.name in STARTERS[node.module]:
                    imported[a.asname or a.name] = f"{node.module}.{a.name}"
                    found.append((node.lineno, f"{node.module}.{a.name}"))
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and \
                f.attr in STARTERS.get(f.value.id, ()):
            found.append((node.lineno, f"{f.value.id}.{f.attr}"))
        elif isinstance(f, ast.Name) and f.id in imported:
            found.append((node.lineno, imported[f.id]))
    return sorted(found)


def test_only_proc_starts_processes():
    bad = [f"{path.relative_to(ROOT)}:{line}: {name}"
           for path in sorted(PKG.rglob("*.py")) if str(path.relative_to(ROOT)) not in ALLOWED
           for line, name in starts(ast.parse(path.read_text()))]
    assert not bad, "processes started outside hugelab/proc.py (use it, or add the file to " \
        "ALLOWED with the reason):\n" + "\n".join(bad)


def test_every_allowed_file_exists_and_starts_processes():
    for rel in ALLOWED:
        assert starts(ast.parse((ROOT / rel).read_text())), f"{rel} needs no place on the list"


def test_the_scan_can_fail():
    code = ("import os, subprocess\nfrom subprocess import check_output as co\n"
            "subprocess.run(['x'])\nsubprocess.DEVNULL\nos.execv('x', ['x'])\nco(['y'])\n"
            "p: subprocess.Popen[str]\n")
    assert starts(ast.parse(code)) == [(2, "subprocess.check_output"), (3, "subprocess.run"),
                                       (5, "os.execv"), (6, "subprocess.check_output")]


def test_run_bytes_and_start():
    cp = proc.run_bytes(["cat"], input=b"\x00\xffdata")
    assert cp.stdout == b"\x00\xffdata" and cp.returncode == 0
    assert proc.run_bytes(["cat"]).stdout == b""  # stdin is /dev/null without input
    with pytest.raises(CommandError, match="exit 3"):
        proc.run_bytes(["sh", "-c", "echo no >&2; exit 3"])
    with pytest.raises(CommandError, match="timed out"):
        proc.run_bytes(["sleep", "5"], timeout=0.2, check=False)
    p = proc.start(["sh", "-c", "exit 4"], stdin=subprocess.DEVNULL)
    assert p.wait(5) == 4
    with pytest.raises(ToolMissingError):
        proc.start(["no-such-tool-hugelab"])


def test_become_replaces_the_process():
    code = ("import os; from hugelab.proc import become; print(os.getpid(), flush=True); "
            "become(['/bin/sh', '-c', 'echo $$'])")
    cp = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                        env={**os.environ, "PYTHONPATH": str(ROOT)})
    python, shell = cp.stdout.split()
    assert python == shell  # the same process, now running sh


def test_wait_for_a_condition_a_give_up_or_the_time():
    import time

    calls = []
    assert proc.wait_for(lambda: calls.append(1) or len(calls) >= 3, 5, interval_s=0.001)
    assert len(calls) == 3
    t0 = time.monotonic()
    asked: list[int] = []
    assert not proc.wait_for(lambda: asked.append(1) or False, 0.1, interval_s=0.01)
    assert time.monotonic() - t0 >= 0.1 and len(asked) >= 2  # asked again once the time was up
    asked.clear()
    assert not proc.wait_for(lambda: asked.append(1) or False, 30, unless=lambda: True)
    assert asked == [1]  # `unless` held at once: no second poll, so no 30 s wait


def test_end_terms_then_kills_a_child_that_ignores_term():
    import subprocess
    import sys

    from hugelab.proc import end
    code = "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); " \
           "print('ready', flush=True); time.sleep(60)"
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stdout.readline() == "ready\n"
    assert end(p, grace_s=0.3) == -9  # SIGTERM ignored: SIGKILL after the grace
    p.stdout.close()
    q = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    assert end(q) == -15  # SIGTERM ends it
