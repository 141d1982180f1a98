"""The report's typed model: what the analysis finds, as dataclasses the renderers read by
attribute. Each part's JSON is its fields in order (`base.Model.to_json`), the same keys and
values as the JSON report has always had; `from_json` reads that JSON back (the run summary
gets the comparisons as JSON)."""
