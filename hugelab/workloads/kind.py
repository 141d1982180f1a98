"""What a workload kind declares about itself: the one documented base every kind fills in.

A kind is one module (or package) under hugelab/workloads/ that defines its workload dataclass
and a module-level `KIND = Kind(...)`, and is registered by one line in
`hugelab.workloads.registry.KINDS`. Nothing outside the kind's own module names it: the
experiment checks, the cost model (`run --dry-run`, `plan`), the guest plumbing, the package
hints of a missing tool, the application-evidence judge and bootstrap's package list all read
these declarations (BenchExec's tool-info modules over `template.py` are the model).

The fields, and who reads them:

- `name`, `workload`, `summary`: the `[workload] kind = NAME`, the dataclass an experiment
  file's table builds (its fields are the file's keys), one line for `--help` and hints.
- `role`: `process` (one process tree, e.g. a memory benchmark), `server` (a server the kind
  starts and loads with its own client, e.g. a database), `client-server` (a server and a client
  tool run host<->guest through a port forward, e.g. a network benchmark).
- `where`: where it can run: `host` (natively), `guest` (hugelab's own guests), `domain` (a
  user's libvirt domain), `interleaved` (design "interleaved"). An experiment asking for
  another place is refused before any trial with the kind's own reason (`refusals`).
- `tools`: the programs it runs, each with the Debian package that provides it; a missing one
  is an error naming that package, and bootstrap installs them (`test_packages`: only the test
  suite needs these, e.g. a server a measurement host does not get).
- `duration`: the experiment-file key holding the load's seconds and its default, for cost
  estimates; None where the load has no fixed length (a build). `seconds`: for a load of
  counted requests or a fixed job, its seconds from the table (the file's keys) at the kind's
  own assumed rate, used where the table does not set the `duration` key. `guest_build`: what
  every trial in a user's domain builds in the guest before its load (a
  hugelab.workloads.preview.GuestBuild from the table), which the cost model adds to the trial.
  `fill_seconds`: for a server kind under request-level interleaving (where `duration_s` is
  the trial's load), the seconds one server spends readying its data before that load (a
  preload written, a snapshot loaded, a cluster copied and prewarmed), from the table and the
  arm's `app`; a block's servers fill at once and share the CPUs, so the cost model adds
  every server's to the block.
- `server`: how its server runs in hugelab's own guests (port, readiness probe, stopper,
  argv changes for the guest NIC); None for kinds without a server.
- `judge`: the rule that turns what the kind recorded about its application's own switch
  (its own report, its server's mappings) into a Check; None for kinds without a switch.
- `file_keys`: extra spellings an experiment file may use, rewritten to the dataclass's fields
  (`size = "2G"` for `size_bytes`), `aliases` naming them for error messages; `interleave`: the kind's own conditions for design
  "interleaved" beyond the generic ones; `counts_own_folios`: the workload reports its own
  buffer's folio sizes (no sampler needed); `asks_own_backing`: it maps its memory itself and
  can ask for madvise/memfd backings no outside program can be told to use; `leftovers`:
  removes what a killed run of the kind left on the host (private datadirs), for `recover`;
  `own_programs`: hugelab's own static programs it runs, copied into a user's guest once.
- `app`: the arm's application settings (`app = {...}`) it knows, each with its type (bool,
  int, str, tuple) or its allowed values; `check_app` holds every arm's and file's `app` to
  them before the workload is built (registry.build_workload, with_arm); None where `app` is
  open (any of the server's own settings: PostgreSQL, MariaDB, checked against the server).
- `keys`: every key of its `[workload]` table (`Key`: name, unit, one line on what it does),
  `keys_of(workload)`: each key is said once, on its dataclass field (`requests: int =
  key(100_000, "redis-benchmark -n: requests of each test", unit="requests")`), whose type
  and default it takes; keys many kinds share are declared once below (`SERVER_PORT`,
  `CLIENT_APART`,
  `METRIC_KEYS`, `program`, `timeout`, `interleaved`, `warm_ops`) and given to `key` in place
  of the words. docs/kinds.md is generated from them (`python -m hugelab.workloads.keydoc`),
  and `keys_of` and a test check that every field a file may set has one (fields the arm or
  hugelab sets, `INTERNAL`, have none).

Hooks a workload object may offer (duck-typed, see hugelab.workloads.base and
hugelab.workloads.interleave): `preflight(backing)`, `run(target, backing)`, `for_arm(arm)`,
`hugetlb_bytes_for(page_size | None)` (the one hook for the hugetlb bytes a trial maps), `settings_warnings(backing)` (what a user's own config sets
that the arm overrides, shown by `run --dry-run`), and for servers `start`, `warm`, `window`,
`finish`, `stop` (hugelab.workloads.interleave) and `request_server`, `request_load`,
`request_result`, `server_pid` (hugelab.workloads.requests). A key-value server kind (Redis,
memcached) gets its `run` and those server hooks from hugelab.workloads.serverkind.ServerKind,
which runs its server natively, in hugelab's own guests (watched from inside, so its own
memory is read there too) and in a user's domain, and supplies only its own parts: server
argv, load generator and parser, its switch's evidence (`describe`), its daemon in a domain
(`InDomain`), its reqmix protocol.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from hugelab.checks import Check
from hugelab.errors import ExperimentError
from hugelab.proc import register_packages
from hugelab.workloads.preview import GuestBuild

Role = Literal["process", "server", "client-server"]
Where = Literal["host", "guest", "domain", "interleaved"]
PLACES: dict[str, str] = {"host": "on the host", "guest": "in hugelab's own guests",
                          "domain": "in a user's libvirt domain",
                          "interleaved": "with design = \"interleaved\""}
# (why, hint) when an experiment cannot run a kind one way; None when it can
Problem = tuple[str, str] | None


@dataclass(frozen=True)
class Tool:
    """A program a kind runs and the Debian package that provides it."""

    name: str
    package: str


@dataclass(frozen=True)
class Key:
    """One key of a kind's [workload] table: its unit ("" for none) and what it does."""

    name: str
    unit: str
    doc: str


# The keys many kinds share, each said once: a kind's field gives these to `key` instead of
# its own words.
SERVER_PORT = Key("port", "", "the server's port (none: a free one)")
CLIENT_APART = Key("client_apart", "", "paired trials on this host: the server on every CPU "
                   "but the last, its load generator alone on the last, as a client on "
                   "another machine loads it (request-level interleaving always runs so)")
METRIC_KEYS = {k.name: k for k in (  # a kind whose metric the user names (command, a jar's)
    Key("better", "", "whether a lower or higher value is better"),
    Key("unit", "", "the metric's unit, for the report"),
    Key("name", "", "the metric's name, for the report"),
)}


def program(name: str, program: str) -> Key:
    """A key naming a program the kind runs: `binary = "/opt/x/bin/sysbench"`."""
    return Key(name, "", f"the {program} program")


def timeout(of: str, none: str = "") -> Key:
    """`timeout_s`: the longest `of` ("a trial", "a run", "a build") may take; `none` says
    what no value means."""
    said = f"the longest {of} may take"
    return Key("timeout_s", "s", f"{said} (none: {none})" if none else said)


def interleaved(name: str, unit: str, doc: str) -> Key:
    """A key that design "interleaved" reads."""
    return Key(name, unit, f'design "interleaved": {doc}')


def warm_ops(unit: str) -> Key:
    """`warm_ops`: a request-interleaved window's untimed `unit`s (requests, transactions)."""
    return Key("warm_ops", unit, "per window and connection, untimed (the other arm's caches)")


# dataclass fields no experiment file sets: the arm's (process_thp, the backing for_arm binds),
# hugelab's own (a server's side, the kind)
INTERNAL = frozenset({"kind", "process_thp", "server", "arm_backing", "domain_arm"})
# declared per kind, set by each arm (`app = { ... }` in [[arms]], [base] or a factor), never
# in [workload]: the application's own settings, which the arms compare
ARM_KEYS = frozenset({"app"})
KEY = "hugelab.key"  # a field's metadata entry holding its Key
T = TypeVar("T")


def key(default: T, doc: str | Key, *, unit: str = "") -> T:
    """A workload dataclass field that is a [workload] key: its default, what it does (`doc`)
    and its unit; `doc` may instead be a shared declaration above (`SERVER_PORT`,
    `program(...)`), which names the field. Used as `requests: int = key(100_000, "...")`."""
    said = doc if isinstance(doc, Key) else Key("", unit, doc)
    return field(default=default, metadata={KEY: said})


def file_fields(workload: type) -> list[dataclasses.Field[Any]]:
    """The fields of a workload dataclass an experiment file may set (less INTERNAL ones)."""
    return [f for f in dataclasses.fields(workload) if f.init and f.name not in INTERNAL]


def keys_of(workload: type) -> tuple[Key, ...]:
    """A kind's `keys`, from its dataclass in the fields' order: each field's `key`.
    TypeError, at import, for a field a file may set that has none, or a shared declaration
    on a field of another name."""
    out = []
    for f in file_fields(workload):
        said = f.metadata.get(KEY)
        if said is None or said.name not in ("", f.name):
            raise TypeError(f"{workload.__name__}.{f.name}: not declared as a [workload] key "
                            f"(key(default, what it does))" if said is None else
                            f"{workload.__name__}.{f.name}: declared as key {said.name!r}")
        out.append(dataclasses.replace(said, name=f.name))
    return tuple(out)


@dataclass(frozen=True)
class ServerInGuest:
    """How a kind's server runs inside hugelab's own guests, reached from the host through a
    127.0.0.1 port forward: the port it listens on in the guest, a readiness probe and a stopper
    that talk its protocol through the forward (the guest agent is busy running it), and argv
    changes the guest needs (e.g. to accept forwarded connections)."""

    tool: str
    port: int
    ready: Callable[[int], bool] | None = None
    stop: Callable[[int], None] | None = None
    guest_argv: Callable[[list[str]], list[str]] | None = None


@dataclass(frozen=True)
class Kind:
    """A workload kind's declaration; see the module docstring for every field."""

    name: str
    workload: type
    summary: str
    role: Role = "process"
    where: frozenset[str] = frozenset({"host", "guest", "domain"})
    tools: tuple[Tool, ...] = ()
    test_packages: tuple[str, ...] = ()
    duration: tuple[str, float | None] | None = None
    seconds: Callable[[dict[str, Any]], float] | None = None
    guest_build: Callable[[dict[str, Any]], GuestBuild | None] | None = None
    fill_seconds: Callable[[dict[str, Any], dict[str, Any]], float] | None = None
    server: ServerInGuest | None = None
    judge: Callable[[Mapping[str, Any]], Check | None] | None = None
    file_keys: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    aliases: tuple[str, ...] = ()
    interleave: Callable[[tuple[Any, ...], dict[str, Any]], Problem] | None = None
    refusals: Mapping[str, str] = field(default_factory=dict)
    leftovers: Callable[[], list[str]] | None = None
    own_programs: tuple[str, ...] = ()
    counts_own_folios: bool = False
    asks_own_backing: bool = False
    keys: tuple[Key, ...] = ()
    app: Mapping[str, type | tuple[Any, ...]] | None = None

    def __post_init__(self) -> None:
        # a missing tool's hint names its package as soon as the kind's module is imported,
        # also where no registry was loaded (a library user building the workload directly)
        register_packages(self.packages())

    def packages(self) -> dict[str, str]:
        return {t.name: t.package for t in self.tools}

    def runs(self, where: str) -> bool:
        return where in self.where

    def refusal(self, where: str) -> str:
        """Why this kind cannot run `where` (its own words where it gave them)."""
        return self.refusals.get(where) or f"workload '{self.name}' does not run {PLACES[where]}"


def check_app(kind: str, app: tuple[tuple[str, Any], ...], keys: Mapping[str, type | tuple[Any, ...]]
              ) -> None:
    """An arm's `app` settings against a kind's known keys and their types: a type (bool, int,
    str, tuple) or a tuple of allowed values. ExperimentError naming the key otherwise."""
    for key, value in app:
        if key not in keys:
            raise ExperimentError(f"{kind}: unknown app setting {key!r}; known: "
                                  f"{', '.join(keys)}")
        want = keys[key]
        if isinstance(want, tuple):
            if value not in want:
                raise ExperimentError(f"{kind}: app {key} must be {app_words(want)}, "
                                      f"got {toml_value(value)}")
            continue
        if want is tuple and isinstance(value, list):
            continue  # an experiment file's list: the kind keeps it as a tuple
        if not isinstance(value, want) or (want is not bool and isinstance(value, bool)):
            raise ExperimentError(f"{kind}: app {key} must be {_type_words(want)}, "
                                  f"got {toml_value(value)}")


def _type_words(want: type) -> str:
    return {bool: "true or false", int: "an integer", str: "a string",
            tuple: "a list"}.get(want, want.__name__)


def toml_value(value: Any) -> str:
    """A value as an experiment file writes it: true, "yes", 4."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value) if isinstance(value, str) else repr(value)  # TOML's escapes


def app_words(want: type | tuple[Any, ...]) -> str:
    """What an `app` setting takes, in an experiment file's words: 'one of "yes", "no", true,
    false', 'an integer'."""
    if isinstance(want, tuple):
        return "one of " + ", ".join(toml_value(w) for w in want)
    return _type_words(want)
