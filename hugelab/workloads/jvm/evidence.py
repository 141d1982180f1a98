"""The jvm kind's evidence judge: the app layer, from the JVM's own report (-Xlog:pagesize,
-Xlog:gc+init; read by jvm/output.py) against the arm's switches (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hugelab.checks import CONTRADICTED, NOT_APPLICABLE, VERIFIED, Check
from hugelab.units import page_label


def check_jvm(settings: dict[str, Any], page_size: int | None, report: dict[str, Any]) -> Check:
    """A JVM's own report (-Xlog:pagesize, -Xlog:gc+init) against its switches: the heap's page
    size is the one asked for (hugetlb: LargePageSizeInBytes, default 2 MiB; THP: 2 MiB; neither:
    4 KiB), and a JVM that disabled UseLargePages for want of a pool is contradicted."""
    heap = report.get("heap_page_kb")
    support = report.get("large_page_support") or "not reported"
    if heap is None:
        return Check(NOT_APPLICABLE, "the JVM printed no heap page size (-Xlog:pagesize)", "app")
    if settings.get("UseLargePages"):
        want = (page_size or 2 << 20) // 1024
        fell_back = [w for w in report.get("warnings") or [] if "UseLargePages disabled" in w]
        if fell_back or heap != want:
            why = fell_back[0] if fell_back else f"Large Page Support: {support}"
            return Check(CONTRADICTED, f"asked for UseLargePages with {page_label(want)} pages, "
                                       f"but the heap has {page_label(heap)} pages ({why})", "app")
        return Check(VERIFIED, f"the JVM reports its heap in {page_label(heap)} pages "
                               f"(Large Page Support: {support})", "app")
    want = 2048 if settings.get("UseTransparentHugePages") else 4
    switch = "UseTransparentHugePages" if want == 2048 else "no large-page switch"
    if heap != want:
        return Check(CONTRADICTED, f"asked for {switch}, but the JVM reports its heap in "
                                   f"{page_label(heap)} pages (Large Page Support: {support})",
                     "app")
    return Check(VERIFIED, f"{switch}: the JVM reports its heap in {page_label(heap)} pages "
                           f"(Large Page Support: {support})", "app")


def judge(evidence: Mapping[str, Any]) -> Check | None:
    """The app layer from the JVM's own report (evidence["jvm"]) against its switches."""
    jvm = evidence.get("jvm")
    if not isinstance(jvm, dict):
        return None
    return check_jvm(jvm.get("settings") or {}, jvm.get("page_size"), jvm)
