"""Command line: one module per command group over the library; `main` is the entry point."""

from hugelab.cli.main import main

__all__ = ["main"]
