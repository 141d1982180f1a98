"""hugelab's C sources (hugelab/csrc): every file belongs to a program the build knows, files
and functions stay small (the same limits as the Python: 600-line files, 60-line functions),
and each program compiles warning-free with -Werror.

The function scanner is a brace-depth count over the source with comments, string and
character literals and preprocessor lines blanked out; it is checked on a sample first.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hugelab.workloads import build, reqmix_build

pytestmark = [pytest.mark.tools, pytest.mark.beside]

MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 60
PROGRAMS = {"hugelab-mem": build.SOURCES, "hugelab-thp": build.THP_SOURCES}
# hugelab-reqmix builds every file of its own directory (workloads/reqmix_build.py, whose
# warning-free build tests/test_reqmix_real.py checks): its files belong to it
REQMIX = sorted(p for p in reqmix_build.SOURCE_DIR.iterdir() if p.suffix in (".c", ".h"))
C_FILES = sorted(p for p in build.CSRC.rglob("*") if p.suffix in (".c", ".h"))

_NOISE = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
_ATTRIBUTE = re.compile(r"__attribute__\s*\(\(.*?\)\)", re.S)
_NAME = re.compile(r"([A-Za-z_]\w*)\s*\(")


def strip_c(text: str) -> str:
    """`text` with comments, literals and preprocessor lines blanked; newlines are kept."""
    code = _NOISE.sub(lambda m: "\n" * m.group().count("\n"), text)
    return "\n".join("" if line.lstrip().startswith("#") else line
                     for line in code.split("\n"))


def functions(text: str) -> list[tuple[str, int, int]]:
    """(name, first line, last line) of each function defined at file scope in `text`; a
    function's first line is its declaration's (attributes and return type included)."""
    code = strip_c(text)
    found: list[tuple[str, int, int]] = []
    depth, start, opened = 0, 0, -1
    for i, ch in enumerate(code):
        if ch == "{":
            if depth == 0:
                opened = i
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                head = _ATTRIBUTE.sub("", code[start:opened])
                name = _NAME.search(head)
                if name and "=" not in head:
                    decl = code[start:opened]
                    first = code.count("\n", 0, start + len(decl) - len(decl.lstrip())) + 1
                    found.append((name.group(1), first, code.count("\n", 0, i) + 1))
                start = i + 1
        elif ch == ";" and depth == 0:
            start = i + 1
    assert depth == 0, "unbalanced braces"
    return found


SAMPLE = """\
#include <stdio.h>
#define WRAP(x) { x }
struct point { int x, y; };            /* not a function { */
static const int table[] = {1, 2, 3};
__attribute__((noreturn))
static void die(const char *msg)
{
    printf("{\\"error\\":\\"%s\\"}\\n", msg); // a brace in a comment: {
    exit(2);
}

static void *(*pick(int w))(void *)
{
    char c = '{';
    (void)c;
    return w ? NULL : NULL;
}
int main(void)
{
LONG}
"""


def test_the_scanner_finds_functions_and_their_lengths() -> None:
    body = "".join(f"    x += {i};\n" for i in range(55))
    sample = SAMPLE.replace("LONG", "    int x = 0;\n" + body + "    return x;\n")
    # main: `int main(void)`, `{`, 57 lines of body and `}`: 60 lines, the most allowed
    assert functions(sample) == [("die", 5, 10), ("pick", 12, 17), ("main", 18, 77)]
    longer = sample.replace("    return x;\n", "    x++;\n    return x;\n")
    name, first, last = functions(longer)[-1]
    assert (name, last - first + 1) == ("main", MAX_FUNCTION_LINES + 1)


def test_every_c_file_belongs_to_a_program() -> None:
    listed = [p for files in PROGRAMS.values() for p in files] + REQMIX
    assert sorted(listed) == C_FILES, "build.py's lists must name every file in csrc/ once"
    assert sorted(p.name for p in build.CSRC.rglob("*")
                  if p.is_file() and p.suffix not in (".c", ".h")) == [], "only C sources in csrc/"


@pytest.mark.parametrize("path", C_FILES, ids=lambda p: p.name)
def test_files_and_functions_stay_small(path: Path) -> None:
    text = path.read_text()
    assert text.count("\n") <= MAX_FILE_LINES, f"{path.name}: over {MAX_FILE_LINES} lines"
    long = [(name, last - first + 1) for name, first, last in functions(text)
            if last - first + 1 > MAX_FUNCTION_LINES]
    assert long == [], f"{path.name}: functions over {MAX_FUNCTION_LINES} lines"


def test_the_scan_sees_the_real_functions() -> None:
    names = {n for p in C_FILES for n, _, _ in functions(p.read_text())}
    assert {"main", "parse_args", "run_interleaved", "map_buffer", "folio_census",
            "print_json", "chase_chunk"} <= names
    assert len(names) > 60


@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_each_program_builds_warning_free(program: str, tmp_path: Path) -> None:
    cflags = build.CFLAGS if program == build.BINARY_NAME else build.THP_CFLAGS
    assert {"-O2", "-Wall", "-Wextra", "-Werror", "-static"} <= set(cflags)
    # and every function one file shares with another is declared in a header first
    stderr = build.compile_binary(PROGRAMS[program], tmp_path / program,
                                  (*cflags, "-Wmissing-prototypes"))
    assert stderr == ""
    assert (tmp_path / program).stat().st_mode & 0o111
