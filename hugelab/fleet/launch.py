"""Start a program with the store password in its environment, taken from a file.

`python -m hugelab.fleet.launch --secret-file FILE -- PROGRAM ARGS...` reads FILE (written by
the fleet playbook, mode 0600), deletes it at once, puts its content in `PGPASSWORD` and
replaces itself with PROGRAM. So the password reaches `hugelab run` in its environment without
ever being on a command line (Ansible's `environment:` keyword would put it on the remote
shell's) and without staying on the host's disk for the length of the run. No file: PROGRAM
starts with the environment as it is.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from hugelab.proc import become

PASSWORD_ENV = "PGPASSWORD"


def take_secret(path: Path) -> str | None:
    """The file's content less its final newline, the file deleted; None when it is absent."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    path.unlink(missing_ok=True)
    return text[:-1] if text.endswith("\n") else text


def main(argv: Sequence[str] | None = None) -> NoReturn:
    p = argparse.ArgumentParser(prog="python -m hugelab.fleet.launch")
    p.add_argument("--secret-file", type=Path, required=True)
    p.add_argument("program", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    program = args.program[1:] if args.program[:1] == ["--"] else args.program
    if not program:
        p.error("no program to start")
    secret = take_secret(args.secret_file)
    if secret:
        os.environ[PASSWORD_ENV] = secret
    become(program)


if __name__ == "__main__":
    main()
