"""Lay a report page out in headless Chromium and read back where things landed.

The report has no scripts of its own; a copy of the page gets one small script that writes
the layout (page height, each asked-for element's box, the visible text) into the DOM, which
`--dump-dom` returns. Used by the first-screen tests and by `bench/report_heights.py`.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
WIDTH = 1300
SCREEN = 1000  # the first screen's height at WIDTH

_PROBE = """<script>
(() => {
  const box = (id) => { const e = document.getElementById(id);
    if (!e) return null; const r = e.getBoundingClientRect();
    return {top: r.top + scrollY, bottom: r.bottom + scrollY}; };
  const out = {height: document.documentElement.scrollHeight,
               width: document.documentElement.scrollWidth,
               text: document.body.innerText, boxes: {}};
  for (const id of IDS) out.boxes[id] = box(id);
  const pre = document.createElement('pre'); pre.id = '__layout';
  pre.textContent = JSON.stringify(out); document.body.appendChild(pre);
})();
</script>"""


def layout(page: str, ids: tuple[str, ...] = (), width: int = WIDTH,
           height: int = SCREEN) -> dict[str, Any]:
    """{height, width, text, boxes: {id: {top, bottom} | None}} of `page` laid out at
    `width` x `height` CSS pixels (heights before the probe's own element is added)."""
    if CHROMIUM is None:
        raise RuntimeError("chromium is not installed")
    probe = _PROBE.replace("IDS", json.dumps(list(ids)))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "page.html"
        path.write_text(page.replace("</body>", probe + "</body>"), encoding="utf-8")
        r = subprocess.run([CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu",
                            f"--window-size={width},{height}", "--virtual-time-budget=5000",
                            "--dump-dom", path.as_uri()],
                           capture_output=True, text=True, timeout=180, check=False)
    m = re.search(r'<pre id="__layout">(.*?)</pre>', r.stdout, re.S)
    if r.returncode != 0 or m is None:
        raise RuntimeError(f"chromium failed ({r.returncode}): {r.stderr[-2000:]}")
    raw = m.group(1).replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", '"')
    out: dict[str, Any] = json.loads(raw.replace("&amp;", "&"))
    return out
