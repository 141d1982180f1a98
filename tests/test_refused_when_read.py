"""Settings that cannot run where an arm puts them are refused when the experiment is read,
before any change, with the arm named: the JVM's many-threads program in a user's domain and
a Redis `rdb` in a guest passed `--dry-run` and then failed every trial, each after its guest
booted (the docs called both refused)."""

from __future__ import annotations

import pytest

from tests.helpers import cli


def experiment(workload: str, arm: str, vm: str) -> str:
    """A native arm and one arm `arm` with `vm`, over the [workload] lines given."""
    return (f'name = "t"\nblocks = 1\n[workload]\n{workload}\n'
            '[[arms]]\nname = "native"\nbacking = "4k"\n'
            f'[[arms]]\nname = "{arm}"\nbacking = "4k"\nvm = {{ {vm} }}\n')


JVM_THREADS_IN_DOMAIN = experiment('kind = "jvm"\nthreads = 10', "in-domain",
                                   'domain = "some-domain", backing = "anon"')
REDIS_RDB_IN_GUEST = experiment('kind = "redis"\nrdb = "./dump.rdb"', "guest",
                                'backing = "anon", mem = "1G"')


@pytest.mark.parametrize(("text", "arm", "says"), [
    (JVM_THREADS_IN_DOMAIN, "in-domain", "not copied into a user's domain"),
    (REDIS_RDB_IN_GUEST, "guest", "is loaded on the host only"),
])
def test_refused_by_the_dry_run_with_the_arm_named(tmp_path, capsys, monkeypatch, text, arm, says):
    monkeypatch.setenv("HUGELAB_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "dump.rdb").write_bytes(b"REDIS0011")
    exp = tmp_path / "e.toml"
    exp.write_text(text)
    rc, out, err = cli(["run", str(exp), "--dry-run", "--store", str(tmp_path / "s.db")], capsys)
    assert rc == 2, out + err
    assert f"arm '{arm}'" in err and says in err and "hint:" in err
    assert "Traceback" not in err and not (tmp_path / "s.db").exists()
    native = tmp_path / "native.toml"  # the same settings natively: accepted
    native.write_text(text.split("[[arms]]\nname = \"" + arm)[0])
    rc, out, err = cli(["run", str(native), "--dry-run", "--store", str(tmp_path / "s.db")],
                       capsys)
    assert rc == 0, out + err
    assert not (tmp_path / "s.db").exists()
