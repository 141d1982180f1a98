"""hugelab fleet: the driver (hugelab.fleet.dispatch), the playbook and the preflight.

The pure parts (tarball, preflight decision, event translation, launcher) are tested with
plain inputs. The rest runs for real against two sshd "hosts" on this machine's loopback
(tests/fleet_hosts.py): Ansible over SSH, the real `./bootstrap setup` (the first time on a
machine: a minute or two; then seconds, see fleet_hosts), the real preflight, and real
`hugelab run`s into a real PostgreSQL store (tests/pg_server.py).
"""

from __future__ import annotations

import _thread
import json
import os
import subprocess
import sys
import tarfile
import threading
from pathlib import Path

import pytest

from hugelab.errors import FleetError, UsageError
from hugelab.fleet import dispatch, events, launch, playbook, preflight, tarball
from hugelab.fleet.events import (
    CANCELLED,
    FAILED,
    LOST,
    OK,
    RECOVERED,
    SELECTED_OUT,
    UNREACHABLE,
    EventTranslator,
    HostEvent,
)
from tests.fleet_hosts import SshFleet

ANSIBLE = Path(sys.executable).parent / "ansible"

TINY = """\
name = "fleet-tiny"
seed = 1
blocks = {blocks}

[workload]
kind = "hugelab-mem"
workload = "chase"
size = "16M"
duration = {duration}

[[arms]]
name = "4k"
backing = "4k"

[[arms]]
name = "2m"
backing = "hugetlb-2M"
"""

HUGE_POOL = """\
name = "fleet-huge-pool"
seed = 1
blocks = 2

[workload]
kind = "hugelab-mem"
workload = "chase"
size = "16M"
duration = 0.2

[[arms]]
name = "4k"
backing = "4k"

[[arms]]
name = "1g"
backing = "hugetlb-1G"
pools = { "1G" = 100000 }
"""


def tiny(tmp_path: Path, blocks: int = 2, duration: float = 0.2) -> Path:
    path = tmp_path / "tiny.toml"
    path.write_text(TINY.format(blocks=blocks, duration=duration))
    return path


# ---------------------------------------------------------------- the source tarball


def test_the_source_tarball_is_deterministic(tmp_path: Path) -> None:
    a = tarball.build_source_tarball(tmp_path / "a.tar.gz")
    b = tarball.build_source_tarball(tmp_path / "b.tar.gz")
    assert a.sha256 == b.sha256
    assert a.path.read_bytes() == b.path.read_bytes()
    with tarfile.open(a.path) as tar:
        members = {m.name: m for m in tar.getmembers()}
    for name in ("bootstrap", "pyproject.toml", "README.md", "LICENSE", "hugelab/__init__.py",
                 "hugelab/fleet/ansible/fleet.yml", "hugelab/fleet/ansible/recover.yml",
                 "hugelab/fleet/ansible/roles/hugelab/tasks/main.yml", "hugelab/csrc"):
        assert name in members, name
    assert not [n for n in members if "__pycache__" in n or "/_bin" in n or n.endswith(".pyc")
                or ".venv" in n]
    assert members["bootstrap"].mode == 0o755
    assert members["pyproject.toml"].mode == 0o644
    assert {m.mtime for m in members.values()} == {tarball.SOURCE_EPOCH}
    assert {(m.uid, m.gid) for m in members.values()} == {(0, 0)}


def test_the_tarball_follows_the_files_not_their_times(tmp_path: Path) -> None:
    root = tmp_path / "src"
    (root / "hugelab" / "__pycache__").mkdir(parents=True)
    for name in tarball.SOURCE_FILES:
        (root / name).write_text(name)
    (root / "hugelab" / "__init__.py").write_text("x = 1\n")
    (root / "hugelab" / "__pycache__" / "junk.pyc").write_text("junk")
    first = tarball.build_source_tarball(tmp_path / "1.tgz", root)
    os.utime(root / "hugelab" / "__init__.py", (1, 1))
    assert tarball.build_source_tarball(tmp_path / "2.tgz", root).sha256 == first.sha256
    (root / "hugelab" / "__init__.py").write_text("x = 2\n")
    assert tarball.build_source_tarball(tmp_path / "3.tgz", root).sha256 != first.sha256
    assert first.files == len(tarball.SOURCE_FILES) + 1


def test_no_bootstrap_no_tarball(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import hugelab

    fake = tmp_path / "site-packages" / "hugelab" / "__init__.py"
    fake.parent.mkdir(parents=True)
    fake.write_text("")
    monkeypatch.setattr(hugelab, "__file__", str(fake))
    with pytest.raises(FleetError, match="no ./bootstrap") as err:
        tarball.build_source_tarball(tmp_path / "x.tgz")
    assert err.value.hint and "clone" in err.value.hint
    with pytest.raises(FleetError, match="lacks"):
        tarball.build_source_tarball(tmp_path / "x.tgz", root=tmp_path)


# ---------------------------------------------------------------- the preflight decision


HOST = {"pools": [{"size": "2M", "size_kb": 2048, "nr": 0, "free": 0, "resv": 0},
                  {"size": "1G", "size_kb": 1048576, "nr": 2, "free": 2, "resv": 0}],
        "meminfo_kb": {"MemAvailable": 8 * 1048576}}


def plan(pools: list[dict[str, object]], skipped: dict[str, str] | None = None) -> dict:
    names = ["4k", "2m", "1g", "guest"]
    return {"cells": [{"name": n, "skipped": (skipped or {}).get(n)} for n in names],
            "host_changes": {"pools": pools}}


ARMS = [preflight.ArmNeeds("4k", frozenset()), preflight.ArmNeeds("2m", frozenset({"2M"})),
        preflight.ArmNeeds("1g", frozenset({"1G"})),
        preflight.ArmNeeds("guest", frozenset(), needs_kvm=True)]


def test_a_host_that_can_run_every_arm_has_no_reasons() -> None:
    pools = [{"size": "2M", "node": None, "pages": 512}, {"size": "1G", "node": None, "pages": 4}]
    assert preflight.unrunnable(plan(pools), HOST, ARMS) == {}


def test_the_dry_runs_skipped_arms_are_reasons() -> None:
    got = preflight.unrunnable(plan([], {"1g": "1 GiB pages unsupported: the CPU lacks pdpe1gb"}),
                               HOST, ARMS)
    assert got == {"1g": "1 GiB pages unsupported: the CPU lacks pdpe1gb"}


def test_a_pool_larger_than_the_memory_selects_its_arms_out() -> None:
    # 10 x 1G: 8 GiB more than the 2 already reserved, and 8 GiB less 256 MiB available
    got = preflight.unrunnable(plan([{"size": "1G", "node": None, "pages": 10}]), HOST, ARMS)
    assert list(got) == ["1g"]
    assert "10 x 1G pages (10.0 GiB)" in got["1g"] and "7.8 GiB" in got["1g"]
    # pages already in the pool count: 9 x 1G needs 7 GiB more, which fits
    assert preflight.unrunnable(plan([{"size": "1G", "node": None, "pages": 9}]), HOST, ARMS) == {}
    # all pools of a run are reserved at once: together they do not fit, both arms go
    both = [{"size": "1G", "node": None, "pages": 9}, {"size": "2M", "node": None, "pages": 512}]
    assert sorted(preflight.unrunnable(plan(both), HOST, ARMS)) == ["1g", "2m"]
    # the reserve is the operator's: a host that keeps more for itself gives less
    assert preflight.unrunnable(plan([{"size": "1G", "node": None, "pages": 9}]), HOST, ARMS,
                                reserve_kb=2 * 1048576) != {}


def test_pool_pages_other_users_hold_are_not_counted_as_the_runs() -> None:
    # a database holds 1000 of the 2M pool's 1100 pages and has 50 of the rest reserved:
    # 50 are free for the run, so 4100 pages need 7.9 GiB more: they do not fit in 7.75 GiB
    host = {**HOST, "pools": [{"size": "2M", "size_kb": 2048, "nr": 1100, "free": 100,
                               "resv": 50}, HOST["pools"][1]]}
    got = preflight.unrunnable(plan([{"size": "2M", "node": None, "pages": 4100}]), host, ARMS)
    assert list(got) == ["2m"]
    # counted by nr, as before, the 1100 pages would have made it fit
    old = {**HOST, "pools": [{"size": "2M", "size_kb": 2048, "nr": 1100}, HOST["pools"][1]]}
    assert preflight.unrunnable(plan([{"size": "2M", "node": None, "pages": 4100}]), old,
                                ARMS) == {}


def test_kvm_demanded_where_there_is_none() -> None:
    got = preflight.unrunnable(plan([]), HOST, ARMS, kvm_problem="/dev/kvm: No such file")
    assert got == {"guest": 'accel = "kvm" and KVM is not usable here (/dev/kvm: No such file)'}


def test_arm_needs_of_an_experiment(tmp_path: Path) -> None:
    from hugelab.experiment import load_experiment

    path = tmp_path / "e.toml"
    path.write_text(HUGE_POOL + '\n[[arms]]\nname = "g"\nbacking = "thp"\n[arms.vm]\n'
                    'backing = "file"\npage_size = "2M"\naccel = "kvm"\n')
    needs = {a.name: a for a in preflight.arm_needs(load_experiment(path))}
    assert needs["4k"] == preflight.ArmNeeds("4k", frozenset())
    assert needs["1g"].pool_sizes == {"1G"}
    assert needs["g"].pool_sizes == {"2M"} and needs["g"].needs_kvm


@pytest.mark.slow
@pytest.mark.reads_host  # its verdict follows this host's pools
def test_preflight_on_this_machine_prints_its_verdict(tmp_path: Path) -> None:
    path = tmp_path / "huge.toml"
    path.write_text(HUGE_POOL)
    cp = subprocess.run([sys.executable, "-m", "hugelab.fleet.preflight", str(path)],
                        capture_output=True, text=True, check=True)
    out = json.loads(cp.stdout)
    assert out["runnable"] is False and list(out["reasons"]) == ["1g"]
    assert out["plan"]["experiment"] == "fleet-huge-pool"


# ---------------------------------------------------------------- events


def ev(kind: str, host: str, task: str, res: dict | None = None, *, at: str = "00:00:01",
       **data: object) -> dict:
    """An ansible-runner event; `at`: when it was created (default: its end, else 00:00:01)."""
    created = str(data.get("end") or f"2025-01-01T{at}")
    return {"event": kind, "created": created,
            "event_data": {"host": host, "task": task, "res": res or {}, **data}}


def test_events_become_host_events_and_outcomes() -> None:
    seen: list[HostEvent] = []
    tr = EventTranslator(seen.append)
    verdict = {"runnable": True, "reasons": {}, "plan": {"experiment": "x"}}
    stream = [
        ev("runner_on_start", "a", "install: ./bootstrap setup"),
        ev("runner_on_ok", "a", "install: ./bootstrap setup", {"changed": False},
           start="2025-01-01T00:00:01", end="2025-01-01T00:00:04"),
        ev("runner_on_ok", "a", "preflight: hugelab run --dry-run",
           {"stdout": json.dumps(verdict)}, start="2025-01-01T00:00:04",
           end="2025-01-01T00:00:06"),
        ev("runner_on_start", "a", "run: hugelab run x.toml", at="00:00:06"),
        ev("runner_on_async_poll", "a", "async_status", at="00:00:30"),
        ev("runner_on_ok", "a", "run: hugelab run x.toml", {"changed": True,
                                                            "stdout": '{"run": 3}'},
           start="2025-01-01T00:00:06", end="2025-01-01T00:01:06"),
        ev("runner_on_ok", "b", "preflight: selected out",
           {"ansible_stats": {"data": {"hugelab_selected_out": {"b": {"1g": "no pdpe1gb"}}}}},
           task_action="ansible.builtin.set_stats"),
        ev("runner_on_failed", "c", "run: hugelab run x.toml",
           {"rc": 2, "msg": "non-zero return code",
            "stderr": "progress...\nhugelab: error: the pool cannot grow\n  hint: free memory"}),
        ev("runner_on_ok", "c", "recover: hugelab recover", {"rc": 0, "changed": True}),
        ev("runner_on_failed", "c", "recover: the run failed",
           {"msg": "hugelab run failed on c (exit 2): the pool cannot grow; the host was "
                   "recovered"}),
        ev("runner_on_failed", "d", "install: ./bootstrap setup", {"msg": "x"},
           ignore_errors=True),
        ev("runner_on_unreachable", "e", "install: is this source unpacked already?",
           {"msg": "All items completed", "results": [{"msg": "ssh: connection refused"}]}),
        {"event": "playbook_on_stats", "event_data": {
            "processed": {"a": 1, "b": 1, "c": 1, "d": 1, "e": 1},
            "failures": {"c": 1}, "dark": {"e": 1}}},
    ]
    for e in stream:
        tr(e)
    tr.finish(canceled=False)
    h = tr.hosts
    assert h["a"].status == OK and h["a"].result == {"run": 3} and h["a"].plan == {"experiment": "x"}
    assert h["a"].timings == {"install": 3.0, "preflight": 2.0, "run": 60.0}
    assert h["a"].started_run
    assert h["b"].status == SELECTED_OUT and h["b"].reasons == {"1g": "no pdpe1gb"}
    assert h["b"].message == "1g: no pdpe1gb"
    assert h["c"].status == FAILED and h["c"].recovered
    assert h["c"].message.startswith("hugelab run failed on c (exit 2): the pool cannot grow")
    assert h["d"].status == OK  # an ignored failure is no failure
    assert h["e"].status == UNREACHABLE and h["e"].message == "ssh: connection refused"
    kinds = [(e.host, e.phase, e.status) for e in seen]
    assert ("a", "run", "running") in kinds  # the poll belongs to the task being polled
    assert ("b", "preflight", SELECTED_OUT) in kinds
    assert ("c", "run", "failed") in kinds
    assert ("d", "install", "failed") not in kinds


def test_a_host_unreachable_during_its_run_is_lost_and_the_others_go_on() -> None:
    """The run is started (async, poll 0) then polled by a task of its own: the start is not
    the result, retried polls are "running", the finished poll is the result; a host whose
    poll cannot reach it is lost (not unreachable before it ran, and not left polling)."""
    seen: list[HostEvent] = []
    tr = EventTranslator(seen.append)
    run, wait = "run: hugelab run x.toml", "run: hugelab run x.toml (until it ends)"
    for host in ("a", "b"):
        tr(ev("runner_on_start", host, run))
        tr(ev("runner_on_ok", host, run, {"changed": True, "started": 1, "finished": 0,
                                           "ansible_job_id": "j1.2"}))
        tr(ev("runner_on_start", host, wait))
        tr(ev("runner_retry", host, wait, {"finished": 0, "retries": 9}))
    assert all(o.status == "pending" and o.result is None for o in tr.hosts.values())
    tr(ev("runner_on_unreachable", "b", wait,
          {"msg": "Failed to connect to the host via ssh: ssh: connect to host 127.0.0.1 port "
                  "2222: Connection refused", "unreachable": True}))
    tr(ev("runner_on_ok", "a", wait, {"finished": 1, "rc": 0, "stdout": '{"run": 4}'}))
    tr({"event": "playbook_on_stats", "event_data": {"processed": {"a": 1, "b": 1},
                                                      "dark": {"b": 1}}})
    tr.finish(canceled=False)
    a, b = tr.hosts["a"], tr.hosts["b"]
    assert a.status == OK and a.result == {"run": 4}
    assert b.status == LOST and b.started_run
    assert b.message.startswith("lost during its run: ") and "Connection refused" in b.message
    assert "hugelab fleet run" in b.message
    kinds = [(e.host, e.status) for e in seen]
    assert kinds.count(("b", "running")) == 2 and ("b", LOST) in kinds
    assert not events.FleetOutcome(tr.hosts, "failed", 4).ok


def test_a_host_unreachable_before_its_run_is_unreachable() -> None:
    tr = EventTranslator()
    tr(ev("runner_on_unreachable", "c", "install: ./bootstrap setup", {"msg": "refused"}))
    assert tr.hosts["c"].status == UNREACHABLE and tr.hosts["c"].message == "refused"


def test_the_playbook_polls_the_run_itself_with_a_bounded_poll(monkeypatch) -> None:
    """Ansible's own async poll (poll > 0) retries an unreachable host until the async
    timeout; the role starts the run with poll 0 and polls it with async_status, whose
    unreachable ends the host at once, each poll bounded by a task timeout."""
    import yaml

    tasks = yaml.safe_load((dispatch.ANSIBLE_DIR / "roles/hugelab/tasks/run.yml").read_text())
    block = next(t for t in tasks if "block" in t)["block"]
    start = next(t for t in block if "ansible.builtin.command" in t)
    poll = next(t for t in block if "ansible.builtin.async_status" in t)
    assert start["poll"] == 0 and "async" in start
    assert poll["ansible.builtin.async_status"]["jid"] == "{{ hugelab_job.ansible_job_id }}"
    assert "finished" in poll["until"] and poll["timeout"] and poll["delay"]
    monkeypatch.delenv("ANSIBLE_SSH_ARGS", raising=False)
    env = playbook._envvars()
    assert "ServerAliveInterval" in env["ANSIBLE_SSH_ARGS"]


def test_failure_messages_prefer_what_hugelab_said() -> None:
    res = {"rc": 2, "msg": "non-zero return code",
           "stderr": "x\nhugelab: error: --label must be printable\n"}
    assert events.failure_message(res) == "exit 2: hugelab: error: --label must be printable"
    assert events.failure_message({"msg": "Destination does not exist"}) == \
        "Destination does not exist"


def test_hosts_left_pending_by_an_interruption_are_cancelled() -> None:
    from datetime import datetime

    tr = EventTranslator()
    tr(ev("runner_on_start", "a", "install: ./bootstrap setup"))
    tr(ev("runner_on_start", "b", "run: hugelab run x.toml", at="00:00:10"))
    tr.finish(canceled=True, now=datetime.fromisoformat("2025-01-01T00:01:10").timestamp())
    assert tr.hosts["a"].status == CANCELLED and not tr.hosts["a"].started_run
    assert tr.hosts["b"].status == CANCELLED and tr.hosts["b"].started_run
    assert tr.hosts["b"].timings["run"] == 60.0  # until the interruption


def test_a_broken_display_does_not_break_the_run() -> None:
    calls = []

    def broken(e: HostEvent) -> None:
        calls.append(e)
        raise RuntimeError("display broke")

    tr = EventTranslator(broken)
    tr(ev("runner_on_start", "a", "install: ./bootstrap setup"))
    tr(ev("runner_on_ok", "a", "install: ./bootstrap setup"))
    assert len(calls) == 1 and tr.hosts["a"].timings  # events still kept, display not called
    with pytest.raises(RuntimeError, match="display broke"):
        tr.raise_callback_error()


# ---------------------------------------------------------------- secrets


def test_a_store_url_with_a_password_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="password") as err:
        dispatch.check_store_url("postgresql://u:secret@127.0.0.1:5432/db")
    assert err.value.hint and "PGPASSWORD" in err.value.hint
    with pytest.raises(UsageError, match="password"):
        dispatch.check_store_url("postgresql://u@127.0.0.1:5432/db?password=secret")
    dispatch.check_store_url("postgresql://u@127.0.0.1:5432/db")
    dispatch.check_store_url("results/hugelab.db")


def test_extravars_are_private(tmp_path: Path) -> None:
    with playbook.private_data_dir() as pdd:
        assert pdd.stat().st_mode & 0o777 == 0o700
        path = playbook.write_extravars(pdd, {"hugelab_store_password": "s3cret"})
        assert path.stat().st_mode & 0o777 == 0o600
        assert path.parent.stat().st_mode & 0o777 == 0o700
        assert json.loads(path.read_text()) == {"hugelab_store_password": "s3cret"}
    assert not pdd.exists()


def test_the_controllers_password_is_blanked_for_ansible(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGPASSWORD", "s3cret")
    env = playbook._envvars()
    assert env["PGPASSWORD"] == ""
    assert env["PATH"].startswith(str(Path(sys.executable).parent))


def test_launch_moves_the_password_from_its_file_to_the_environment(tmp_path: Path) -> None:
    secret = tmp_path / "pw"
    secret.write_text("s3cret\n")
    secret.chmod(0o600)
    show = "import os, sys; print(os.environ.get('PGPASSWORD')); print(sys.argv[1:])"
    cp = subprocess.run([sys.executable, "-m", "hugelab.fleet.launch", "--secret-file",
                         str(secret), "--", sys.executable, "-c", show, "a b"],
                        capture_output=True, text=True, check=True)
    assert cp.stdout.splitlines() == ["s3cret", "['a b']"]
    assert not secret.exists()
    # no file: the environment as it is
    cp = subprocess.run([sys.executable, "-m", "hugelab.fleet.launch", "--secret-file",
                         str(secret), "--", sys.executable, "-c", show],
                        capture_output=True, text=True, check=True,
                        env={**os.environ, "PGPASSWORD": "outer"})
    assert cp.stdout.splitlines()[0] == "outer"
    assert launch.take_secret(secret) is None


def test_an_inventory_without_hosts_is_an_error(tmp_path: Path) -> None:
    inv = tmp_path / "empty.ini"
    inv.write_text("[fleet]\n")
    with pytest.raises(FleetError, match="no host to work on") as err:
        dispatch.run_fleet(tiny(tmp_path), inv, preflight_only=True)
    assert err.value.hint and "--limit" in err.value.hint
    with pytest.raises(UsageError, match="no inventory"):
        dispatch.run_fleet(tiny(tmp_path), tmp_path / "missing.ini")


# ---------------------------------------------------------------- real hosts over SSH


def inventory(fleet: SshFleet, tmp_path: Path, **kw: object) -> Path:
    return fleet.inventory(tmp_path / "hosts.ini", **kw)  # type: ignore[arg-type]


def ansible(inv: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(ANSIBLE), "-i", str(inv), *args], capture_output=True, text=True,
                          env={**os.environ, "ANSIBLE_NOCOLOR": "1"})


@pytest.mark.slow
def test_the_hosts_answer_ansible(fleet: SshFleet, tmp_path: Path) -> None:
    inv = inventory(fleet, tmp_path, unreachable=["ghost"])
    cp = ansible(inv, "all", "-m", "ansible.builtin.ping")
    assert "alpha | SUCCESS" in cp.stdout and "beta | SUCCESS" in cp.stdout, cp.stdout
    assert "ghost | UNREACHABLE" in cp.stdout
    assert len({h.port for h in fleet.hosts}) == 2


@pytest.mark.slow
@pytest.mark.reads_host  # its preflight reads this host's THP mode and pools
def test_install_and_preflight_on_every_host(fleet: SshFleet, tmp_path: Path) -> None:
    """The playbook installs hugelab (real ./bootstrap setup) and runs its preflight; an
    inventory entry on a closed port is reported unreachable; nothing runs (preflight only)."""
    inv = inventory(fleet, tmp_path, unreachable=["ghost"])
    events: list[HostEvent] = []
    out = dispatch.run_fleet(tiny(tmp_path), inv, preflight_only=True, on_event=events.append)
    assert out.hosts["alpha"].status == OK and out.hosts["beta"].status == OK, \
        list(dispatch.summarize(out))
    assert out.hosts["ghost"].status == UNREACHABLE
    assert out.hosts["ghost"].message.startswith("ssh: connect to host 127.0.0.1 port")
    assert out.hosts["ghost"].message.endswith("Connection refused")
    assert not out.ok and not out.interrupted
    for name in ("alpha", "beta"):
        o = out.hosts[name]
        assert set(o.timings) == {"install", "preflight"}, o.timings
        assert o.plan is not None and o.plan["experiment"] == "fleet-tiny"
        assert not o.started_run and o.result is None
    assert {(e.host, e.phase) for e in events} >= {("alpha", "install"), ("beta", "preflight")}
    cp = ansible(inv, "fleet", "-m", "ansible.builtin.command",
                 "-a", "{{ hugelab_root }}/.venv/bin/hugelab --help")
    assert cp.stdout.count("usage: hugelab") == 2, cp.stdout + cp.stderr


@pytest.mark.slow
@pytest.mark.host  # it reads the real pools: another test's pool, up meanwhile, has free pages
def test_preflight_selects_out_hosts_that_cannot_run_an_arm(fleet: SshFleet,
                                                            tmp_path: Path) -> None:
    # beta keeps all its memory for itself: no 2M pool fits there
    inv = inventory(fleet, tmp_path, hostvars={"beta": {"hugelab_reserve_mib": "100000000"}})
    out = dispatch.run_fleet(tiny(tmp_path), inv, preflight_only=True)
    assert out.hosts["alpha"].status == OK
    beta = out.hosts["beta"]
    assert beta.status == SELECTED_OUT and list(beta.reasons) == ["2m"]
    assert "2M pages" in beta.reasons["2m"] and "kept for the host" in beta.reasons["2m"]
    assert out.ok  # selected out is not a failure
    # a pool no host has: every host is selected out, and none runs anything
    huge = tmp_path / "huge.toml"
    huge.write_text(HUGE_POOL)
    out = dispatch.run_fleet(huge, inventory(fleet, tmp_path))
    assert {h: o.status for h, o in out.hosts.items()} == {"alpha": SELECTED_OUT,
                                                           "beta": SELECTED_OUT}
    assert all(list(o.reasons) == ["1g"] and not o.started_run for o in out.hosts.values())


@pytest.mark.slow
@pytest.mark.host
def test_a_fleet_run_into_a_shared_postgres_store(fleet: SshFleet, tmp_path: Path,
                                                  pg_url: str) -> None:
    """Both hosts run (one kernel: they take turns on its lock, --wait-host), each as its own
    labelled run in one PostgreSQL store; the password (PGPASSWORD here) reaches them without
    being in any event, and no copy of it stays on a host."""
    from hugelab.store.locate import open_store
    from tests.hostguard import host_state

    password = os.environ["PGPASSWORD"]
    before = host_state()
    events: list[HostEvent] = []
    out = dispatch.run_fleet(tiny(tmp_path), inventory(fleet, tmp_path), store_url=pg_url,
                             on_event=events.append)
    assert out.ok, list(dispatch.summarize(out))
    for name in ("alpha", "beta"):
        o = out.hosts[name]
        assert o.started_run and set(o.timings) == {"install", "preflight", "run"}
        assert o.result is not None and o.result["executed"] == 4
        assert password not in o.result["store"]
        assert not (fleet.hosts[0].root.parent / name / ".fleet" / "store-password").exists()
    assert not any(password in repr(e) for e in events)
    with open_store(pg_url) as store:
        runs = store.runs()
    assert sorted(r["label"] for r in runs) == ["alpha", "beta"]
    assert all(r["trials"] == 4 for r in runs)
    assert host_state() == before


@pytest.mark.slow
@pytest.mark.host
def test_a_failed_run_is_recovered_and_reported(fleet: SshFleet, tmp_path: Path) -> None:
    out = dispatch.run_fleet(tiny(tmp_path), inventory(fleet, tmp_path), limit="alpha",
                             run_args=["--blocks", "0"])
    assert list(out.hosts) == ["alpha"]
    alpha = out.hosts["alpha"]
    assert alpha.status == FAILED and alpha.recovered
    assert "the number of blocks must be at least 1" in alpha.message
    assert "the host was recovered" in alpha.message


@pytest.mark.slow
@pytest.mark.host
def test_ctrl_c_stops_the_runs_and_recovers_the_hosts(fleet: SshFleet, tmp_path: Path) -> None:
    from tests.hostguard import host_state

    before = host_state()
    timer: list[threading.Timer] = []

    def interrupt_once_running(e: HostEvent) -> None:
        if e.phase == "run" and e.status == "started" and e.task.startswith("hugelab run") \
                and not timer:
            timer.append(threading.Timer(6.0, _thread.interrupt_main))
            timer[0].start()

    out = dispatch.run_fleet(tiny(tmp_path, blocks=200, duration=0.5), inventory(fleet, tmp_path),
                             on_event=interrupt_once_running)
    assert out.interrupted and not out.ok
    assert {o.status for o in out.hosts.values()} == {RECOVERED}, list(dispatch.summarize(out))
    assert all(o.recovered and "recover" in o.timings for o in out.hosts.values())
    cp = subprocess.run(["pgrep", "-f", str(fleet.cache_root) + r"/\w+/\.venv/bin/hugelab run"],
                        capture_output=True, text=True)
    assert cp.stdout == "", "a hugelab run survived the interruption"
    assert host_state() == before


@pytest.mark.slow
@pytest.mark.host
def test_recover_fleet_on_idle_hosts(fleet: SshFleet, tmp_path: Path) -> None:
    out = dispatch.recover_fleet(inventory(fleet, tmp_path, unreachable=["ghost"]))
    assert out.hosts["alpha"].status == RECOVERED and out.hosts["beta"].status == RECOVERED
    assert out.hosts["ghost"].status == UNREACHABLE
    assert set(out.hosts["alpha"].timings) == {"recover"}


def test_the_store_outage_window_reaches_every_hosts_run() -> None:
    """`fleet run --store-outage` is each host's `hugelab run --store-outage` (with a shared
    store only: a host's own SQLite file cannot go away)."""
    from hugelab.cli.fleet import host_run_args
    from hugelab.cli.main import build_parser

    def args(*extra: str):
        return build_parser().parse_args(["fleet", "run", "x.toml", "-i", "inv.ini", *extra])
    assert host_run_args(args(), 4, "postgresql://u@127.0.0.1/db") == ["--store-outage", "300"]
    assert host_run_args(args("--store-outage", "90s", "--blocks", "2"), 2,
                         "postgresql://u@127.0.0.1/db") == ["--blocks", "2", "--store-outage", "90"]
    assert host_run_args(args("--store-outage", "10m"), 4, None) == []
    extra = dispatch.fleet_extravars(Path("x.toml"), tarball.SourceTarball(Path("s.tgz"), "0", 1),
                                     store_url=None,
                                     password=None, preflight_only=False,
                                     run_args=["--store-outage", "90"], extra=None)
    assert extra["hugelab_run_args"] == ["--store-outage", "90"]
