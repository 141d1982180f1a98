import contextlib
import os

import pytest


def _marked(node, *names: str) -> bool:
    """Whether the test carries one of these markers (not `in node.keywords`: keywords also
    hold parameter ids, so a test parametrized with "vm" would count as a guest test)."""
    return any(node.get_closest_marker(n) is not None for n in names)


def _guest_beside(node) -> bool:
    """A guest test of the background lane: own QEMU guests judged from inside, beside the
    machine lane's host tests (`beside` and `vm`, not `host`; see _host_lock)."""
    from tests.hostguard import in_background_lane
    return in_background_lane() and _marked(node, "vm") and not _marked(node, "host")


# the machine lane's longest file, its guests and servers most of its time: run last, when the
# Python lane that runs beside the machine lane for its first minutes has ended
LAST = "tests/test_examples_run.py"


def pytest_collection_modifyitems(config, items):
    from tests.hostguard import in_background_lane
    if in_background_lane():  # the background lane's guests first: done before the
        # machine lane reaches its aged hosts, which hold the memory lock alone
        items.sort(key=lambda item: not _marked(item, "vm"))
    else:  # the examples' guests last: after the background lane's minutes on the CPUs
        items.sort(key=lambda item: item.nodeid.startswith(LAST))
    if os.geteuid() == 0:
        return
    skip = pytest.mark.skip(reason="needs root: changes real host settings")
    for item in items:
        if _marked(item, "host", "vm"):
            item.add_marker(skip)


_GUARD = None


def pytest_configure(config):
    """A test without a machine marker (host, vm, server, tools, slow) is in the quick tier: it
    may start Python and coreutils, nothing else (tests/tierguard.py)."""
    global _GUARD
    from tests.tierguard import Guard
    _GUARD = Guard()
    _GUARD.install()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    with _GUARD.watching(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    with _GUARD.watching(item):
        return (yield)


def _killed_runs_state_dirs() -> list[str]:
    """State directories of earlier test sessions that still hold a journal with entries, or
    records of workloads or guests: left by hugelab runs killed with their suite."""
    import glob
    import json

    dirs = set()
    for path in glob.glob("/tmp/pytest-of-*/pytest-*/**/journal.json", recursive=True):
        try:
            entries = json.load(open(path)).get("entries")
        except (OSError, ValueError, AttributeError):
            continue
        if entries:
            dirs.add(os.path.dirname(path))
    for pattern in ("workload-*.json", "qemu-*.json"):
        dirs |= {os.path.dirname(p) for p in
                 glob.glob(f"/tmp/pytest-of-*/pytest-*/**/{pattern}", recursive=True)}
    return sorted(dirs)


def pytest_collection_finish(session):
    """A suite killed mid-test leaves the host as its hugelab runs changed it (a THP size knob
    at never, a pool), journaled in the killed tests' own state directories, where no later
    run looks: every THP test after it then fails (a CI run once started right after such a
    kill). Replay those journals with `hugelab recover` before any test reads the host; a
    session without host or guest tests (the quick tier) reads no host and leaves it alone."""
    if os.geteuid() != 0 or not any(_marked(i, "host", "vm") for i in session.items):
        return
    import subprocess
    import sys

    for state in _killed_runs_state_dirs():
        r = subprocess.run([sys.executable, "-m", "hugelab.cli", "recover"], capture_output=True,
                           text=True, env={**os.environ, "HUGELAB_STATE_DIR": state}, timeout=120)
        said = (r.stdout + r.stderr).strip().replace("\n", "; ")
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        line = f"recovered a killed run's leftovers in {state}: {said or 'nothing to do'}"
        if reporter is not None:
            reporter.write_line(line)
        else:
            print(line)


@pytest.fixture(autouse=True)
def _host_lock(request):
    """Tests that change the real host (pools, THP, mounts, guests) run one at a time across
    pytest processes, so two developers' suites on one machine cannot shrink each other's
    pools or see each other's changes in their before/after checks. A test that only reads
    the host (`reads_host`, in the Python lane) waits for the lock too: the machine lane's
    host tests run beside it and set THP to never or fill pools mid-test. The background
    lane's guests (`beside` and `vm`) take neither: they change nothing on the host and judge
    only what their guests say; they share the memory lock, which a `fills_memory` test holds
    alone."""
    from tests.hostguard import host_lock, host_state, memory_lock, put_back
    if _guest_beside(request.node):  # beside the machine lane: its host state is not ours to
        # compare; only free memory is shared with it (tests/hostguard.memory_lock)
        with memory_lock(shared=True):
            yield
        return
    if not _marked(request.node, "host", "vm", "reads_host"):
        yield
        return
    alone = (memory_lock(shared=False) if _marked(request.node, "fills_memory")
             else contextlib.nullcontext())
    with host_lock(), alone:
        before = host_state()
        yield
        after = host_state()
        if after != before:  # a leak here would fail every later test that reads the host
            put_back(before)
            changed = {k: (before.get(k), after.get(k)) for k in before.keys() | after.keys()
                       if before.get(k) != after.get(k)}
            pytest.fail(f"the test left the host changed (now put back): {changed}",
                        pytrace=False)


@pytest.fixture(scope="session")
def pg_server():
    """A real PostgreSQL on 127.0.0.1 for the session (tests/pg_server.py)."""
    from tests.pg_server import pg_bin, running_server
    if pg_bin() is None:
        pytest.fail("PostgreSQL is not installed: ./bootstrap setup installs it")
    with running_server() as server:
        yield server


@pytest.fixture
def pg_url(pg_server, monkeypatch):
    """A fresh database's URL (no password in it: PGPASSWORD is set, as users should)."""
    monkeypatch.setenv("PGPASSWORD", pg_server.password)
    return pg_server.new_database()


@pytest.fixture(scope="session")
def fleet(tmp_path_factory):
    """Two sshd "hosts" (alpha, beta) on loopback (tests/fleet_hosts.py); one kernel, so one
    hugelab state directory."""
    from tests.fleet_hosts import SshFleet
    if os.geteuid() != 0:
        pytest.skip("needs root: the test hosts are sshd servers taking root logins")
    top = tmp_path_factory.mktemp("fleet")
    with SshFleet(top / "hosts", state_dir=top / "state") as f:
        yield f
