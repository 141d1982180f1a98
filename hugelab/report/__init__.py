"""`hugelab report`: load a run (runload.py), analyse it (analysis.py), render it as terminal
tables (text.py), Markdown (markdown.py) or one self-contained HTML file (html.py, plots.py)."""
