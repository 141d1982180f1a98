"""The report's tables, one module per section, each pure over the typed `Result`: plain
strings in `table.Table`s that the text, Markdown and HTML renderers lay out. Nothing here
escapes: every renderer escapes every cell for its own format."""
