"""How tall the HTML report is, and where its answer lands, in headless Chromium at 1300 px.

    .venv/bin/python bench/report_heights.py STORE [STORE ...] [--code DIR] [--out DIR]

For each store, renders `hugelab report --html` of its latest run in a fresh process with the
code in --code (default: this checkout; pass a `git worktree` of an older commit to measure
"before") and lays the page out with tests/chromium_page.py: the page height in CSS pixels,
and the bottom of the answer block (`#answer`, absent before issue 22) against the first
screen (1000 px).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.chromium_page import SCREEN, WIDTH, layout  # noqa: E402


def render(store: Path, code: Path, out: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(code)}
    r = subprocess.run([sys.executable, "-m", "hugelab.cli", "report", "--store", str(store),
                        "--html", str(out), "--json"], capture_output=True, text=True,
                       cwd=code, env=env, check=False)
    if r.returncode != 0:
        raise SystemExit(f"report of {store} failed: {r.stderr[-2000:]}")
    return out.read_text(encoding="utf-8")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("stores", nargs="+", type=Path)
    ap.add_argument("--code", type=Path, default=ROOT, help="source tree that renders")
    ap.add_argument("--out", type=Path, help="keep the HTML files here")
    args = ap.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="hugelab-heights-"))
    out.mkdir(parents=True, exist_ok=True)
    print(f"width {WIDTH} px, first screen {SCREEN} px, code {args.code.resolve()}")
    for store in args.stores:
        page = render(store.resolve(), args.code.resolve(), out / f"{store.stem}.html")
        lay = layout(page, ("answer",))
        box = lay["boxes"]["answer"]
        where = "no answer block" if box is None else \
            f"answer ends at {box['bottom']:,.0f} px ({'first screen' if box['bottom'] <= SCREEN else 'below it'})"
        print(f"{store.name}: {lay['height']:,} px tall; {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
