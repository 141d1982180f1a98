"""How the report and `hugelab show` write a number: four significant digits, a large one whole
with thousands separators (17,670 transactions/s; it read 1.767e+04)."""

from __future__ import annotations

import pytest

from hugelab.report.table import num


@pytest.mark.parametrize(("value", "shown"), [
    (17670.4, "17,670"), (123456789.0, "123,456,789"), (-25000.0, "-25,000"),
    (9999.4, "9999"), (9999.6, "10,000"), (-9999.7, "-10,000"), (95.123, "95.12"), (0.0012345, "0.001234"), (None, "-"),
    (float("inf"), "inf"), (1e16, "1e+16"),
])
def test_numbers_are_written_without_exponents_where_they_need_none(value, shown):
    assert num(value) == shown
    assert num(17670.4, ".1f") == "17670.4"  # a caller's own format stands
