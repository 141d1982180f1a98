"""The fleet report on SQLite stores built here: hosts with known effects, pooled across them."""

from __future__ import annotations

import base64
import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from hugelab.errors import UsageError
from hugelab.report import fleet
from hugelab.report.analysis import Options, analyse
from hugelab.report.fleet.forestplot import forest
from hugelab.report.fleet.hostload import host_facts, host_label
from hugelab.report.fleet.pooling import FleetComparison
from hugelab.report.runload import from_rows, load_run
from hugelab.stats import meta
from hugelab.store import Store, Trial

EVIL = "<script>alert(1)</script>"
XEON = "Intel(R) Xeon(R) Gold 6338"
EPYC = "AMD EPYC 7763"


def facts(cpu: str = XEON, kernel: str = "6.1.0-18-amd64", pdpe1gb: bool = True,
          hostname: str | None = None) -> dict[str, Any]:
    """Host facts as `hugelab.host.inspect.inspect_host` records them (plus a CPU model)."""
    out: dict[str, Any] = {
        "kernel": kernel, "machine": "x86_64",
        "cpu": {"pse": True, "pdpe1gb": pdpe1gb, "cpus": 16, "model": cpu},
        "thp": {"supported": True, "enabled": "madvise", "defrag": "madvise"},
        "numa_nodes": [0, 1], "meminfo_kb": {"MemTotal": 64 * 1048576}}
    if hostname:
        out["hostname"] = hostname
    return out


def set_label(st: Store, run_id: int, label: str) -> None:
    """The `label` column (migration 0004) when this store has it, else nothing (the test then
    relies on the hostname in the host facts)."""
    cols = {r[1] for r in st.db.execute("PRAGMA table_info(runs)")}
    if "label" in cols:
        with st.db:
            st.db.execute("UPDATE runs SET label = ? WHERE id = ?", (label, run_id))


def add_host(st: Store, label: str, effect: float, *, name: str = "fleet-exp",
             blocks: int = 20, seed: int = 1, host: dict[str, Any] | None = None,
             accel: str = "native", finished: bool = True, noise: float = 0.01) -> int:
    """One host's run: arm `thp` at (1 + effect) x `4k` (lower is better), shared block noise."""
    rng = np.random.default_rng(seed)
    exp = {"name": name, "baseline": "4k", "blocks": blocks,
           "arms": [{"name": "4k", "backing": "4k"}, {"name": "thp", "backing": "thp"}]}
    host = host if host is not None else facts(hostname=label)
    if "hostname" not in host:
        host = {**host, "hostname": label}
    run_id, _ = st.get_or_create_run(f"{name}@{label}#{seed}", name, exp, host)
    set_label(st, run_id, label)
    factor = {"4k": 1.0, "thp": 1.0 + effect}
    trials = []
    for b in range(blocks):
        common = 100.0 * math.exp(rng.normal(0, 0.03))
        for pos, arm in enumerate(rng.permutation(["4k", "thp"])):
            value = common * factor[arm] * math.exp(rng.normal(0, noise))
            trials.append(Trial(run_id, b, pos, str(arm), "ok", value, "ns_per_load", "ns",
                                "lower", provenance={"accel": accel, "kernel": host["kernel"],
                                                     "hugelab": "0.1.0"}))
    st.add_trials(trials)
    if finished:
        st.set_run_status(run_id, "finished")
    return run_id


EFFECTS = {"host-a": -0.10, "host-b": -0.12, "host-c": 0.0, "host-d": -0.10}


@pytest.fixture(scope="module")
def store_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("fleet") / "fleet.db"
    with Store(path) as st:
        add_host(st, "host-a", -0.10, seed=1)
        add_host(st, "host-b", -0.12, seed=2)
        add_host(st, "host-c", 0.0, seed=3, host=facts(EPYC, "6.6.13", pdpe1gb=False))
        add_host(st, "host-d", -0.10, seed=4, host=facts(kernel="6.1.0-25-amd64"))
        add_host(st, "host-a", 0.5, name="other-exp", seed=5)  # another experiment: ignored
    return path


@pytest.fixture(scope="module")
def report(store_path: Path) -> fleet.FleetReport:
    with Store(store_path) as st:
        return fleet.FleetReport.from_store(st, "fleet-exp")


def comp(r: fleet.FleetReport, name: str = "thp vs 4k") -> FleetComparison:
    return next(c for c in r.comparisons if c.name == name)


def test_per_host_estimates_match_the_injected_effects(report: fleet.FleetReport) -> None:
    c = comp(report)
    got = {e.label: e for e in c.hosts}
    assert set(got) == set(EFFECTS)
    for label, effect in EFFECTS.items():
        e = got[label]
        assert e.effect_pct == pytest.approx(100 * effect, abs=1.5), label
        assert e.ci_low_pct < e.effect_pct < e.ci_high_pct
        assert e.pooled and e.weight is not None
    assert {got[k].verdict for k in ("host-a", "host-b", "host-d")} == {"faster"}
    assert got["host-c"].verdict in ("equivalent", "inconclusive")
    assert sum(e.weight or 0 for e in c.hosts) == pytest.approx(1.0)


def test_a_hosts_verdict_is_the_single_run_reports(store_path: Path,
                                                   report: fleet.FleetReport) -> None:
    c = comp(report)
    with Store(store_path) as st:
        for e in c.hosts:
            single = analyse(load_run(st, e.run_id), Options()).json()["comparisons"][0]
            assert e.verdict == single["verdict"]
            assert e.effect_pct == pytest.approx(single["effect_pct"])
            assert e.ci_low_pct == pytest.approx(single["ci_low_pct"])


def test_pooled_effect_lies_between_the_hosts_and_hosts_differ(
        report: fleet.FleetReport) -> None:
    c = comp(report)
    effects = [e.effect_pct for e in c.hosts]
    assert min(effects) < c.effect_pct < max(effects)
    assert c.ci_low_pct < c.effect_pct < c.ci_high_pct
    p = c.pooled
    assert p is not None and p.k == 4
    assert p.tau > 0.02  # hosts differ by ~10%: tau of several %
    assert p.i2 > 0.9
    assert p.q_p < 0.001
    assert p.pred_low < p.ci_low and p.pred_high > p.ci_high
    assert c.how.startswith("pooled over 4 hosts")
    assert any("hosts differ" in w for w in report.warnings)


def test_groups_are_alike_hosts(report: fleet.FleetReport) -> None:
    by_label = {h.label: h for h in report.hosts}
    assert by_label["host-a"].group == by_label["host-b"].group == by_label["host-d"].group
    assert by_label["host-c"].group != by_label["host-a"].group  # EPYC, no pdpe1gb, 6.6
    assert len(report.groups) == 2
    groups = {g.labels: g for g in comp(report).groups}
    xeon = groups[("host-a", "host-b", "host-d")]
    assert xeon.how == "pooled over 3 hosts" and xeon.verdict == "faster"
    assert -12.5 < xeon.effect_pct < -9.5
    epyc = groups[("host-c",)]
    assert epyc.how == "host host-c's own"
    assert epyc.verdict == next(e.verdict for e in comp(report).hosts if e.label == "host-c")


def test_host_facts_are_read_and_unknown_when_absent(report: fleet.FleetReport) -> None:
    c = next(h for h in report.hosts if h.label == "host-c")
    assert c.facts["cpu_model"] == EPYC
    assert c.facts["pdpe1gb"] == "no"
    assert c.facts["kernel"] == "6.6.13"
    assert c.facts["memory"] == "64.0 GiB"
    assert c.facts["numa_nodes"] == "2"
    assert c.facts["thp"] == "madvise/madvise"
    assert c.facts["accel"] == "native"
    assert (c.ok, c.flagged, c.failed) == (40, 0, 0)
    run = {"id": 9, "host": {}}
    data = from_rows(run, [])
    got = host_facts(run, data)
    assert set(got.values()) == {"unknown"}


def test_another_experiment_is_ignored(report: fleet.FleetReport, store_path: Path) -> None:
    assert all(h.run_id != 5 for h in report.hosts)
    assert len(report.hosts) == 4
    with Store(store_path) as st, pytest.raises(UsageError, match="no run of experiment"):
        fleet.FleetReport.from_store(st, "nope")


def test_several_runs_of_one_host_use_the_latest_finished(tmp_path: Path) -> None:
    with Store(tmp_path / "s.db") as st:
        add_host(st, "h1", -0.1, seed=1)
        older = add_host(st, "h2", -0.1, seed=2)
        add_host(st, "h2", -0.1, seed=3, finished=False)  # later, still running
        r = fleet.FleetReport.from_store(st, "fleet-exp")
    assert {h.label: h.run_id for h in r.hosts}["h2"] == older
    assert any("h2: 2 runs" in n and "latest finished" in n for n in r.notes)


def test_labels_fall_back_to_hostname_then_run_id() -> None:
    assert host_label({"id": 3, "label": "web-1", "host": {"hostname": "x"}}) == "web-1"
    assert host_label({"id": 3, "label": "", "host": {"hostname": "x"}}) == "x"
    assert host_label({"id": 3, "host": {}}) == "run 3"


def test_one_host_is_its_own_result(tmp_path: Path) -> None:
    with Store(tmp_path / "s.db") as st:
        add_host(st, "solo", -0.1, seed=1)
        r = fleet.FleetReport.from_store(st, "fleet-exp")
    c = comp(r)
    assert c.pooled is None
    assert c.verdict == c.hosts[0].verdict == "faster"
    assert c.effect_pct == c.hosts[0].effect_pct
    assert any("nothing pooled" in n for n in c.notes)
    fleet.render_text(r)
    json.dumps(fleet.to_json(r))


def test_a_host_with_too_few_pairs_is_shown_but_not_pooled(tmp_path: Path) -> None:
    with Store(tmp_path / "s.db") as st:
        add_host(st, "h1", -0.1, seed=1)
        add_host(st, "h2", -0.1, seed=2)
        add_host(st, "h3", -0.1, seed=3, blocks=4)
        r = fleet.FleetReport.from_store(st, "fleet-exp")
    c = comp(r)
    short = next(e for e in c.hosts if e.label == "h3")
    assert not short.pooled and short.weight is None and short.verdict == "inconclusive"
    assert c.pooled is not None and c.pooled.k == 2


def test_json_is_complete_and_json_safe(report: fleet.FleetReport) -> None:
    j = fleet.to_json(report)
    text = json.dumps(j, allow_nan=False)
    assert json.loads(text) == j
    c = j["comparisons"][0]
    assert c["name"] == "thp vs 4k"
    assert {h["label"] for h in c["hosts"]} == set(EFFECTS)
    assert c["pooled"]["k"] == 4 and c["pooled"]["tau_pct"] > 2
    assert c["pooled"]["pred_low_pct"] < c["ci_low_pct"]
    assert len(j["hosts"]) == 4 and j["hosts"][0]["facts"]["cpu_model"] == XEON


def test_text_and_markdown_show_every_host_and_the_pooled_row(report: fleet.FleetReport) -> None:
    text = fleet.render_text(report, width=100)
    for label in EFFECTS:
        assert label in text
    assert "Across hosts" in text and "Per host: thp vs 4k" in text
    c = comp(report)
    assert re.search(rf"thp vs 4k\s+{c.verdict}\s+{c.effect_pct:+.1f}%", text)
    assert max(len(line) for line in text.splitlines()) <= 100
    assert "CPU model: " + XEON in text  # the facts table is stacked at 100 columns
    md = fleet.render_markdown(report)
    assert "| host-a |" in md and "# hugelab fleet report: fleet-exp" in md


def test_html_escapes_every_store_string_and_embeds_the_forest_plot(tmp_path: Path) -> None:
    with Store(tmp_path / "s.db") as st:
        add_host(st, EVIL, -0.1, seed=1,
                 host=facts(cpu=f"cpu {EVIL}", kernel=f"6.1 {EVIL}", hostname=EVIL))
        add_host(st, "plain", -0.1, seed=2)
        add_host(st, "b&b", -0.05, seed=3)
        r = fleet.FleetReport.from_store(st, "fleet-exp")
    assert any(h.label == EVIL for h in r.hosts)
    page = fleet.render_html(r)
    assert "<script" not in page.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "b&amp;b" in page
    imgs = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(imgs) == 1
    assert base64.b64decode(imgs[0]).startswith(b"\x89PNG")
    md = fleet.render_markdown(r)
    assert "<script" not in md.lower()


def test_forest_plot_draws_every_host(report: fleet.FleetReport) -> None:
    png = forest(comp(report), report.options)
    assert png.startswith(b"\x89PNG") and len(png) > 5000


def test_a_generic_store_without_sqlite_gives_the_same_report(store_path: Path,
                                                              report: fleet.FleetReport) -> None:
    class Plain:  # only the three calls the fleet report documents
        def __init__(self, st: Store) -> None:
            self.st = st

        def runs(self) -> list[dict[str, Any]]:
            return self.st.runs()

        def values(self, run_id: int) -> list[tuple[int, int, str, str, str, float | None]]:
            return self.st.values(run_id)

        def trials(self, run_id: int) -> Any:
            return self.st.trials(run_id)

    with Store(store_path) as st:
        other = fleet.FleetReport.from_store(Plain(st), "fleet-exp")
    assert fleet.to_json(other) == fleet.to_json(report)


def test_tcg_hosts_are_warned_about_and_grouped_apart(tmp_path: Path) -> None:
    with Store(tmp_path / "s.db") as st:
        add_host(st, "kvm-1", -0.1, seed=1, accel="kvm")
        add_host(st, "tcg-1", -0.1, seed=2, accel="tcg")
        r = fleet.FleetReport.from_store(st, "fleet-exp")
    assert any("TCG" in w and "tcg-1" in w for w in r.warnings)
    assert len(r.groups) == 2


def test_pooled_numbers_are_meta_pool_of_the_host_estimates(report: fleet.FleetReport) -> None:
    c = comp(report)
    p = meta.pool([e.log_estimate for e in c.hosts], [e.log_se ** 2 for e in c.hosts])
    assert c.pooled is not None
    assert c.pooled.estimate == pytest.approx(p.estimate)
    assert c.pooled.tau2 == pytest.approx(p.tau2)


def test_the_runs_label_column_names_the_host(tmp_path: Path) -> None:
    """`runs.label` (the fleet's name for the host, migration 0004) wins over the hostname.
    On a store from before that migration the column is added here, in this session only."""
    with Store(tmp_path / "s.db") as st:
        a = add_host(st, "a", -0.1, seed=1, host=facts(hostname="box-1"))
        add_host(st, "b", -0.1, seed=2, host=facts(hostname="box-2"))
        if "label" not in {r[1] for r in st.db.execute("PRAGMA table_info(runs)")}:
            st.db.execute("ALTER TABLE runs ADD COLUMN label TEXT NOT NULL DEFAULT ''")
        with st.db:
            st.db.execute("UPDATE runs SET label = 'web-1' WHERE id = ?", (a,))
            st.db.execute("UPDATE runs SET label = '' WHERE id != ?", (a,))
        r = fleet.FleetReport.from_store(st, "fleet-exp")
    assert sorted(h.label for h in r.hosts) == ["box-2", "web-1"]
