"""SQL lives in the store (docs/architecture.md, issue 37): no module of hugelab/ outside
hugelab/store/ writes a query or calls the store's raw SQL methods; the report and the
commands call store methods instead. The workload kinds are the one exception to the first
rule, for the SQL they send to the database servers they benchmark (never to the store's
tables)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from hugelab.store.keys import experiment_key_of, labelled, labelled_pattern

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "hugelab"
OWNER = PKG / "store"
SERVERS = PKG / "workloads"  # SQL for the servers under test, not for the store
STATEMENT = re.compile(r"\bSELECT\b[\s\S]*\bFROM\b|\bINSERT\s+INTO\b|\bUPDATE\s+\S+\s+SET\b|"
                       r"\bDELETE\s+FROM\b|\b(?:CREATE|ALTER|DROP)\s+(?:TABLE|INDEX)\b")
STORE_TABLE = re.compile(r"\b(?:FROM|JOIN|INTO|UPDATE|TABLE)\s+(?:runs|trials|migrations)\b",
                         re.IGNORECASE)
RAW = {"tuples", "rows", "json_text", "insert_returning_id", "execute", "one"}  # SqlStore's


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring nodes (prose may name a query's words)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                out.add(id(body[0].value))
    return out


def _texts(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, text) of every string literal; an f-string's holes read as {}."""
    skip = _docstrings(tree)
    parts = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            out.append((node.lineno, "".join(v.value if isinstance(v, ast.Constant) else "{}"
                                             for v in node.values)))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                id(node) not in skip | parts:
            out.append((node.lineno, node.value))
    return out


def _store_calls(tree: ast.AST, names: set[str]) -> list[int]:
    """Lines that call a raw SQL method on something named like a store (`store.tuples`)."""
    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr in RAW and isinstance(node.func.value, ast.Name)
            and node.func.value.id in names]


def sql_outside_the_store(source: str, where: str, *, server_sql: bool = False) -> list[str]:
    """What in `source` (a module at `where`) breaks the rule: queries, the store's tables
    named in SQL, raw SQL calls on a store (`server_sql`: a workload's SQL for its server)."""
    tree = ast.parse(source)
    found = [f"{where}:{line}: {text.strip()[:70]!r}" for line, text in _texts(tree)
             if STORE_TABLE.search(text) or (not server_sql and STATEMENT.search(text))]
    found += [f"{where}:{line}: a raw SQL call on a store"
              for line in _store_calls(tree, {"store", "st", "db", "src", "dst", "pg", "lite"})]
    return found


def test_no_sql_outside_the_store():
    bad = []
    for path in sorted(PKG.rglob("*.py")):
        if OWNER in path.parents:
            continue
        bad += sql_outside_the_store(path.read_text(), str(path.relative_to(ROOT)),
                                     server_sql=SERVERS in path.parents)
    assert not bad, "SQL outside hugelab/store/ (add a store method instead):\n" + \
        "\n".join(bad)


def test_the_check_can_fail():
    """Yesterday's queries in cli/run.py, cli/fleet.py and report/runload.py are caught; a
    workload's SQL for its own server, prose and a store method call are not."""
    old = '''
def _first(store, run_id, column):
    row = store.one(f"SELECT {column} FROM trials WHERE run_id = ? AND {column} IS NOT NULL "
                    "LIMIT 1", (run_id,))
def watch(store, key):
    return store.tuples("SELECT r.label, COUNT(t.id) FROM runs r LEFT JOIN trials t "
                        "ON t.run_id = r.id WHERE r.key LIKE ?", (f"{key}@%",))
def details(store, run_id):
    last = store.json_text("provenance", "earlier_attempts", -1, "error")
'''
    found = sql_outside_the_store(old, "old.py")
    assert len(found) == 5, found  # two queries, three raw calls
    server = 'SQL = ("CREATE EXTENSION IF NOT EXISTS pg_prewarm; SELECT 1 FROM pg_class c")\n'
    assert sql_outside_the_store(server, "w.py", server_sql=True) == []
    assert sql_outside_the_store(server, "r.py") != []  # but not outside the workloads
    assert sql_outside_the_store('X = "SELECT count(*) FROM trials"\n', "w.py",
                                 server_sql=True) != []  # never the store's own tables
    fine = '"""Values come from one SELECT ... FROM trials."""\nrows = store.values(1)\n'
    assert sql_outside_the_store(fine, "ok.py") == []


def test_the_store_owns_the_run_key():
    assert labelled("abc") == "abc" and labelled("abc", "host-1") == "abc@host-1"
    assert experiment_key_of("abc@host-1") == experiment_key_of("abc") == "abc"
    assert labelled_pattern("abc") == "abc@%"
