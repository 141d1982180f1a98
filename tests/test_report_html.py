"""HTML, Markdown and terminal output: escaping, self-containment, and a real browser render."""

from __future__ import annotations

import base64
import re
import shutil
import subprocess

import pytest
from rich.console import Console

from hugelab.report import html, markdown, plots, text
from hugelab.report.analysis import Options, analyse
from hugelab.report.runload import load_run
from hugelab.store import Store
from tests.helpers import make_store

pytestmark = pytest.mark.beside  # lock-free tests here run beside the machine lane (docs/testing.md)

EVIL = "<script>alert(1)</script>"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def evil_report(tmp_path_factory):
    db = tmp_path_factory.mktemp("evil") / "s.db"
    make_store(db, arms={"4k": 1.0, EVIL: 0.95, "thp$x$": 0.97}, name=f"exp {EVIL}",
               flagged={EVIL: {3}}, flag_reason=f"reason {EVIL}")
    with Store(db) as st:
        data = load_run(st)
    return analyse(data, Options())


@pytest.fixture(scope="module")
def evil_html(evil_report):
    details, notes = plots.detail_figures(evil_report)
    return html.render(evil_report.result, details, lead=plots.lead_figures(evil_report),
                       figure_notes=notes)


def test_every_store_string_is_escaped_in_html(evil_html, evil_report):
    assert evil_report.result.comparisons[0].candidate == EVIL  # it really is in the data
    assert "<script" not in evil_html.lower()
    escaped = "&lt;script&gt;alert(1)&lt;/script&gt;"
    assert escaped in evil_html
    assert f"reason {escaped}" in evil_html  # the flag reason
    assert f"exp {escaped}" in evil_html  # the experiment name, in <title> and <h1>
    assert f"<title>hugelab report: exp {escaped}</title>" in evil_html


def test_html_is_self_contained(evil_html):
    assert "http://" not in evil_html and "https://" not in evil_html
    srcs = re.findall(r'src="([^"]*)"', evil_html)
    # the effects figure leads; means, histograms, ECDFs; drift + forest per comparison
    assert len(srcs) == 1 + 3 + 2 * 2
    for src in srcs:
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    assert not re.search(r"<(link|iframe|object|embed)\b", evil_html, re.I)
    assert "url(" not in evil_html


def test_markdown_escapes_store_strings(evil_report):
    md = markdown.render(evil_report.result)
    assert "<script" not in md.lower()
    assert "&lt;script&gt;" in md
    assert "| faster |" in md


def test_terminal_output_prints_store_strings_literally(evil_report):
    con = Console(record=True, width=200)
    text.render(evil_report.result, con, full=True)
    out = con.export_text()
    assert EVIL in out  # no markup interpretation, nothing swallowed
    assert "faster" in out and "Classic table" in out


def test_png_figures_are_real_images(evil_report):
    for caption, png in plots.all_figures(evil_report):
        assert png[:8] == b"\x89PNG\r\n\x1a\n", caption
        assert len(png) > 5000, caption


@pytest.mark.tools
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")
def test_html_renders_in_a_real_browser(evil_html, tmp_path):
    page = tmp_path / "report.html"
    page.write_text(evil_html, encoding="utf-8")
    shot = tmp_path / "shot.png"
    r = subprocess.run([str(CHROMIUM), "--headless=new", "--no-sandbox", "--disable-gpu",
                        f"--screenshot={shot}", "--window-size=1200,2000", page.as_uri()],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert shot.exists() and shot.stat().st_size > 20_000
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
