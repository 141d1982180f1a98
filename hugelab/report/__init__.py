"""`hugelab report`: load a run (runload.py), analyse it (analysis.py, with perseries.py,
factorial.py, repeats.py, latency.py) into the typed model (model/: dataclasses, each part's
`to_json` is the JSON report's), lay it out as tables, one module per section (sections/,
gathered by runtables.py), and render it, one module per format: terminal (text.py), Markdown
(markdown.py), one self-contained HTML file (html.py, plots.py) or JSON (jsonreport.py)."""
