"""The user's own benchmark for the jvm kind (`jar` with `args` and a `regex` for its metric):
checked as the experiment loads (a dry run included), not by every trial's java, and copied
into a user's domain for a trial there."""

from __future__ import annotations

import os
import re

from hugelab.errors import ExperimentError
from hugelab.workloads.guestside import GUEST_DIR, GuestSide


def jar_problem(path: str) -> str | None:
    """Why `path` is not a jar java could run, or None."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except FileNotFoundError:
        return "does not exist"
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    if head[:2] != b"PK":
        return "is not a jar (a jar is a zip file; this one does not start like one)"
    return None


def check_jar(jar: str | None, regex: str | None) -> None:
    """A regex with one group for the jar's metric, and a jar that is one; ExperimentError."""
    if jar is not None and not regex:
        raise ExperimentError("jvm: a jar needs regex, with one group matching its metric")
    if regex is not None:
        try:
            groups = re.compile(regex).groups
        except re.error as exc:
            raise ExperimentError(f"jvm: bad regex {regex!r}: {exc}") from exc
        if groups != 1:
            raise ExperimentError(f"jvm: regex {regex!r} must have exactly one group")
    if jar is not None and (why := jar_problem(jar)):
        raise ExperimentError(f"jvm: jar {jar!r} {why}",
                              hint="jar = the path of your benchmark's jar on this host "
                                   "(it runs as java -jar JAR ARGS)")


def put_jar(side: GuestSide, jar: str, argv: list[str]) -> list[str]:
    """The jar copied into the guest's work directory (removed with it after the trial), and
    `argv` naming the copy."""
    side.workdir()
    guest_jar = f"{GUEST_DIR}/{os.path.basename(jar)}"
    with open(jar, "rb") as f:
        side.put_bytes(guest_jar, f.read())
    out = list(argv)
    out[out.index(jar)] = guest_jar
    return out
