"""A user's postgresql.conf: its settings read (pure), and the ones hugelab owns set aside.

hugelab passes a trial's settings as server options (`-c name=value`), which PostgreSQL ranks
above any configuration file, so the user's settings go to the server the same way, under the
arm's `app` and hugelab's own: `huge_pages` / `huge_page_size` per arm, the private socket
(`listen_addresses`, `unix_socket_directories`, `port`) and the private copy's own files
(`data_directory`, `hba_file`, ...). A user's file that sets one of those gets a warning, since
the arm's value is the one the server runs with."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from hugelab.errors import ExperimentError
from hugelab.workloads.postgres.server import RESERVED

OWNED = RESERVED | {"huge_pages", "huge_page_size"}
INCLUDES = ("include", "include_dir", "include_if_exists")
_LINE = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_.]*)\s*(=\s*|\s+)(.*)$")


def _value(rest: str) -> str:
    """The value at the start of `rest`: a quoted string ('' and backslash escapes), or the
    word before any whitespace or comment."""
    rest = rest.strip()
    if not rest.startswith("'"):
        return re.split(r"[\s#]", rest, maxsplit=1)[0]
    out, i = [], 1
    while i < len(rest):
        ch = rest[i]
        if ch == "\\" and i + 1 < len(rest):
            out.append(rest[i + 1])
            i += 2
            continue
        if ch == "'":
            if rest[i + 1:i + 2] == "'":
                out.append("'")
                i += 2
                continue
            return "".join(out)
        out.append(ch)
        i += 1
    raise ValueError("an unterminated quoted value")


def parse(text: str, where: str = "postgresql.conf") -> list[tuple[str, str]]:
    """(name, value) of every setting, names lowercased, in file order (pure); ExperimentError
    naming the line of one it cannot read."""
    out: list[tuple[str, str]] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        m = _LINE.match(line)
        try:
            if m is None:
                raise ValueError("not `name = value`")
            out.append((m.group(1).lower(), _value(m.group(3))))
        except ValueError as exc:
            raise ExperimentError(f"{where}:{n}: cannot read {line.strip()!r}: {exc}") from None
    return out


def refused_name(message: str) -> str | None:
    """The parameter a server's refusal names (`unrecognized configuration parameter "x"`,
    `invalid value for parameter "x"`), lowercased; None when it names none."""
    m = re.search(r'parameter "([^"]+)"', message)
    return m.group(1).lower() if m else None


def line_of(path: str, name: str) -> str | None:
    """'PATH:LINE: the line' of the setting `name` in the conf at `path`: its last one, the one
    PostgreSQL takes; None when the file does not set it."""
    try:
        lines = Path(path).read_text().splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    found = None
    for n, line in enumerate(lines, 1):
        m = _LINE.match(line)
        if m and not line.lstrip().startswith("#") and m.group(1).lower() == name:
            found = f"{path}:{n}: {line.strip()}"
    return found


def refused_line(conf: str | None, items: list[tuple[str, str]], app: tuple[Any, ...],
                 message: str) -> str | None:
    """Where the user's conf sets the parameter a server's refusal names, when that value is
    what reached the server: a setting the conf passes on (`kept`) that the arm's `app` does
    not override; 'PATH:LINE: the line', else None."""
    name = refused_name(message)
    if not conf or name is None or name not in kept(items) or \
            name in {str(k).lower() for k, _ in app}:
        return None
    return line_of(conf, name)


def server_words(message: str) -> str:
    """A server's own words in a failed `postgres` call (FATAL, ERROR, DETAIL, HINT), not the
    argv before them; the whole message when it has none."""
    said = [m.group(0).strip() for m in
            re.finditer(r"(FATAL|ERROR|DETAIL|HINT):[^\n]*", message)]
    return " ".join(said) or message


def read(path: str) -> list[tuple[str, str]]:
    """The user's conf file's settings; includes are refused (their paths would be read
    relative to a copy hugelab makes)."""
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ExperimentError(f"postgres: conf {path!r} cannot be read: {exc}") from None
    items = parse(text, path)
    if inc := [k for k, _ in items if k in INCLUDES]:
        raise ExperimentError(f"postgres: conf {path} uses {inc[0]}, which hugelab does not "
                              "follow", hint="put every setting in the one file")
    return items


def kept(items: list[tuple[str, str]]) -> dict[str, str]:
    """The settings hugelab passes on: the last of each name, less those it owns (pure)."""
    return {k: v for k, v in items if k not in OWNED and k not in INCLUDES}


def warnings(items: list[tuple[str, str]], used: dict[str, object], where: str) -> list[str]:
    """One warning per owned setting a user's file sets, with the value the server runs with
    instead (pure)."""
    out = []
    for key, value in dict(items).items():
        if key in OWNED:
            now = used.get(key)
            instead = f"this arm runs with {key} = {now}" if now is not None else \
                "hugelab sets it itself (a private copy, listening on its own socket only)"
            out.append(f"{where} sets {key} = {value!r}, which hugelab owns: {instead}")
    return out
