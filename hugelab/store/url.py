"""Store URLs: which specs are URLs, the name to show for one (no password), and the
password split from it for the driver. Pure string handling, no connection."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from hugelab.errors import UsageError

SCHEMES = ("postgresql://", "postgres://")


def is_url(spec: str | Path) -> bool:
    return str(spec).startswith(SCHEMES)


def display(spec: str | Path) -> str:
    """`spec` as it may be shown: a URL loses its password (in the user part or the query)."""
    text = str(spec)
    if not is_url(text):
        return text
    try:
        parts = urlsplit(text)
    except ValueError:
        return text.split("://", 1)[0] + "://(an unreadable URL, not shown)"
    netloc = parts.netloc
    if "@" in netloc:
        user, host = netloc.rsplit("@", 1)
        netloc = f"{user.split(':', 1)[0]}@{host}"
    query = urlencode([(k, v) for k, v in parse_qsl(parts.query) if k.lower() != "password"])
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def split_password(url: str) -> tuple[str, str | None]:
    """(the URL without its password, the password or None): the password goes to the driver
    as a parameter, so no error message that quotes the URL can show it."""
    try:
        parts = urlsplit(url)
        password = parts.password
        query = parse_qsl(parts.query, keep_blank_values=True)
    except ValueError as exc:
        raise UsageError(f"cannot read the store URL {display(url)}",
                         hint="postgresql://USER@HOST:PORT/DB") from exc
    from_query = [v for k, v in query if k.lower() == "password"]
    return display(url), password if password is not None else (from_query[0] if from_query
                                                                else None)
