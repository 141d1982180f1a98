"""The report as JSON: the typed result's own JSON (`model.base.Model.to_json`), the same
key paths and values the JSON report has always had."""

from __future__ import annotations

import json

from hugelab.report.model.result import Result


def render(result: Result) -> str:
    """The whole report as one JSON document."""
    return json.dumps(result.to_json(), indent=2, default=str)
