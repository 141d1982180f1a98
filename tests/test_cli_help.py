"""Every command's --help teaches: it fits a screen and ends with an example that parses."""

from __future__ import annotations

import shlex

import pytest

from hugelab.cli import doc as clidoc
from hugelab.cli.examples import EXAMPLES
from hugelab.cli.main import build_parser

SCREEN_LINES = 40


def _helps() -> dict[str, str]:
    return {name: text for name, text in clidoc.helps()}


def test_every_help_fits_a_screen_and_shows_an_example():
    helps = _helps()
    assert set(helps) == set(clidoc.commands())
    for name, text in helps.items():
        lines = text.splitlines()
        assert len(lines) <= SCREEN_LINES, f"`{name} --help` is {len(lines)} lines"
        assert "Example" in text and "\n  hugelab" in text, f"`{name} --help` shows no example"


@pytest.mark.parametrize("command", sorted(EXAMPLES))
def test_each_example_parses_as_its_own_command(command):
    line = EXAMPLES[command][0]
    assert (line + " ").startswith(command + " "), f"{command}'s example runs another command: {line}"
    build_parser().parse_args(shlex.split(line)[1:])  # SystemExit(2) on an example that does not parse


def test_every_command_has_an_example():
    assert sorted(set(clidoc.commands()) - {"hugelab"} - set(EXAMPLES)) == []


@pytest.mark.parametrize(("argv", "said"), [
    (["report", "--run", "1"], "hugelab report: error: unrecognized arguments: --run (the run "
     "is given without a flag: hugelab report RUN)"),
    (["vm", "diff", "--jsn", "a", "b"], "hugelab vm diff: error: unrecognized arguments: --jsn "
     "(did you mean --json?)"),
    (["report", "1", "2"], "hugelab report: error: unrecognized arguments: 2\n"),
    (["--frob", "report", "1"], "hugelab: error: unrecognized arguments: --frob\n"),
])
def test_an_unknown_argument_is_told_by_its_commands_parser(argv, said, capsys):
    from hugelab.cli.main import main
    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and said in err
    command = "" if argv[0].startswith("-") else f" {argv[0]}"  # hugelab's own flag: its usage
    assert err.startswith(f"usage: hugelab{command} ")
