"""A fleet run's events and outcomes: ansible-runner's event dicts in, small `HostEvent`s out
(for a progress display) and one `HostOutcome` per host kept (`EventTranslator`), and the
fleet's `FleetOutcome`. A host's outcome is ok, selected-out (the preflight found arms it cannot
run, with the reasons), failed (with the message, and whether the host was recovered),
unreachable, lost (unreachable after its run had started: the run may go on there, and the next
fleet run resumes it), or - after Ctrl-C - recovered (its run was stopped and the host put back
by `ansible/recover.yml`) or cancelled (it had not started running).

The translation is pure: it takes ansible-runner's event dicts and keeps the outcomes, so it is
tested with plain dicts.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

PHASES = ("install", "preflight", "run", "recover")
# a host's outcome
OK, SELECTED_OUT, FAILED, UNREACHABLE, LOST, RECOVERED, CANCELLED = (
    "ok", "selected-out", "failed", "unreachable", "lost", "recovered", "cancelled")
PENDING = "pending"

@dataclass(frozen=True)
class HostEvent:
    """One step of one host, for a progress display.

    phase: install | preflight | run | recover ("" for a task outside them); status: started,
    ok, changed, skipped, running (an async poll), failed, unreachable, selected-out."""

    host: str
    phase: str
    status: str
    message: str = ""
    task: str = ""


@dataclass
class HostOutcome:
    """What happened on one host. `timings`: seconds per phase (first task's start to last
    task's end); `reasons`: arm -> why, for a host selected out; `plan`: the preflight's dry
    run there; `result`: `hugelab run --json`'s output there."""

    host: str
    status: str = PENDING
    message: str = ""
    recovered: bool = False
    started_run: bool = False
    reasons: dict[str, str] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    plan: dict[str, Any] | None = None
    result: dict[str, Any] | None = None


@dataclass
class FleetOutcome:
    """The fleet run: one outcome per host the playbook reached, ansible-runner's final status
    (successful, failed, canceled, timeout) and rc, and whether the controller was interrupted."""

    hosts: dict[str, HostOutcome]
    status: str
    rc: int
    interrupted: bool = False
    elapsed_s: float = 0.0

    def with_status(self, status: str) -> list[str]:
        return sorted(h for h, o in self.hosts.items() if o.status == status)

    @property
    def ok(self) -> bool:
        """Every host ran or was selected out, and the controller was not interrupted."""
        return not self.interrupted and all(o.status in (OK, SELECTED_OUT)
                                            for o in self.hosts.values())


def phase_of(task: str) -> tuple[str, str]:
    """("run", "hugelab run x.toml") from the task name "run: hugelab run x.toml"."""
    head, sep, rest = task.partition(": ")
    return (head, rest) if sep and head in PHASES else ("", task)


def _when(stamp: Any) -> float | None:
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(str(stamp)).timestamp()
    except ValueError:
        return None


def failure_message(res: Mapping[str, Any]) -> str:
    """The most telling line(s) of a failed task's result: its msg, or the error lines of its
    stderr, or the end of its stderr."""
    msg = str(res.get("msg") or "")
    if msg and "non-zero return code" not in msg:
        return msg.strip()
    lines = [ln.strip() for ln in str(res.get("stderr") or "").splitlines() if ln.strip()]
    errors = [ln for ln in lines if "error" in ln.lower() or ln.lower().startswith("hint")]
    text = " / ".join(errors or lines[-3:])
    rc = res.get("rc")
    return f"exit {rc}: {text}" if rc is not None and text else text or msg or "failed"


def unreachable_message(res: Mapping[str, Any]) -> str:
    """Why a host could not be reached (for a loop: the first item's reason)."""
    msgs = [str(r.get("msg")) for r in res.get("results") or [] if isinstance(r, dict)
            and r.get("msg")]
    msg = str(res.get("msg") or "")
    msg = (msgs[0] if msgs and (not msg or msg == "All items completed") else msg
           or "unreachable").strip()
    # Ansible's 'Task failed: Data could not be sent ... can be reached over ssh: <ssh's error>'
    return msg.rsplit("reached over ssh: ", 1)[-1].removeprefix("Task failed: ")


def _json_or_none(text: Any) -> dict[str, Any] | None:
    try:
        data = json.loads(str(text))
    except (TypeError, ValueError):
        return None
    return data if isinstance(data, dict) else None


class EventTranslator:
    """ansible-runner events in, HostEvents out (to `on_event`), HostOutcomes kept."""

    def __init__(self, on_event: Callable[[HostEvent], None] | None = None) -> None:
        self.on_event = on_event
        self.hosts: dict[str, HostOutcome] = {}
        self._spans: dict[tuple[str, str], list[float]] = {}
        self._current: dict[str, tuple[str, str]] = {}  # host -> (phase, task) it is in
        self.callback_error: Exception | None = None

    def host(self, name: str) -> HostOutcome:
        return self.hosts.setdefault(name, HostOutcome(name))

    def __call__(self, event: Mapping[str, Any]) -> bool:
        """ansible-runner's event_handler: translate, and keep the event (True)."""
        self.feed(event)
        return True

    def feed(self, event: Mapping[str, Any]) -> HostEvent | None:
        kind = str(event.get("event", ""))
        data = event.get("event_data") or {}
        if kind == "playbook_on_stats":
            self._stats(data)
            return None
        host = data.get("host")
        if not host or not kind.startswith("runner_"):
            return None
        phase, task = phase_of(str(data.get("task") or ""))
        res = data.get("res") or {}
        out = self.host(str(host))
        if kind == "runner_on_async_poll":  # its task is Ansible's own async_status
            phase, task = self._current.get(out.host, (phase, task))
        elif kind == "runner_on_start":
            self._current[out.host] = (phase, task)
        self._time(out, phase, data, event.get("created"))
        ev = self._translate(kind, out, phase, task, data, res)
        if ev is not None and self.on_event is not None and self.callback_error is None:
            try:
                self.on_event(ev)
            except Exception as exc:  # raised after the playbook, not inside it
                self.callback_error = exc
        return ev

    def raise_callback_error(self) -> None:
        """An exception `on_event` raised (later events were not passed to it): raised once
        the playbook is over, so a broken display cannot strand hosts mid-run."""
        if self.callback_error is not None:
            raise self.callback_error

    def _time(self, out: HostOutcome, phase: str, data: Mapping[str, Any],
              created: Any) -> None:
        if not phase:
            return
        span = self._spans.setdefault((out.host, phase), [])
        for stamp in (data.get("start"), data.get("end"), created):
            t = _when(stamp)
            if t is not None:
                span.append(t)
        if span:
            out.timings[phase] = round(max(span) - min(span), 3)

    def _translate(self, kind: str, out: HostOutcome, phase: str, task: str,
                   data: Mapping[str, Any], res: Mapping[str, Any]) -> HostEvent | None:
        action = str(data.get("task_action") or data.get("resolved_action") or "")
        if kind == "runner_on_start":
            if phase == "run" and task.startswith("hugelab run"):
                out.started_run = True
            return HostEvent(out.host, phase, "started", task=task)
        if kind == "runner_on_ok":
            return self._ok(out, phase, task, action, res)
        if kind == "runner_item_on_failed":
            return None  # the task's own runner_on_failed / _unreachable follows
        if kind == "runner_on_failed":
            if data.get("ignore_errors"):
                return None
            out.status, out.message = FAILED, failure_message(res)
            return HostEvent(out.host, phase, "failed", out.message, task)
        if kind == "runner_on_unreachable":
            out.status, out.message = UNREACHABLE, unreachable_message(res)
            if out.started_run:  # mid-run: the others go on, this one is lost for now
                out.status = LOST
                out.message = f"lost during its run: {out.message} (its run may go on there: " \
                              "when the host is back, `hugelab fleet run` again resumes it, " \
                              "or `hugelab fleet recover` stops it and puts the host back)"
            return HostEvent(out.host, phase, out.status, out.message, task)
        if kind == "runner_on_skipped":
            return HostEvent(out.host, phase, "skipped", task=task)
        if kind in ("runner_on_async_poll", "runner_retry"):  # a poll of the running run
            return HostEvent(out.host, phase, "running", task=task)
        return None

    def _ok(self, out: HostOutcome, phase: str, task: str, action: str,
            res: Mapping[str, Any]) -> HostEvent:
        if action.endswith("set_stats"):
            reasons = ((res.get("ansible_stats") or {}).get("data") or {}) \
                .get("hugelab_selected_out", {}).get(out.host)
            if reasons:
                out.status, out.reasons = SELECTED_OUT, dict(reasons)
                out.message = "; ".join(f"{arm}: {why}" for arm, why in out.reasons.items())
                return HostEvent(out.host, phase, SELECTED_OUT, out.message, task)
        if phase == "preflight" and task.startswith("hugelab run --dry-run"):
            verdict = _json_or_none(res.get("stdout"))
            if verdict is not None:
                out.plan = verdict.get("plan")
        elif phase == "run" and task.startswith("hugelab run"):
            if res.get("ansible_job_id") and not res.get("finished"):  # started, not over
                return HostEvent(out.host, phase, "running", task=task)
            out.result = _json_or_none(res.get("stdout"))
            out.status = OK
        elif phase == "recover" and task in ("hugelab recover", "hugelab recover again"):
            out.recovered = res.get("rc") == 0
        return HostEvent(out.host, phase, "changed" if res.get("changed") else "ok", task=task)

    def _stats(self, data: Mapping[str, Any]) -> None:
        """The play's recap: every host it processed; a host that is still pending and did not
        fail got to the end (the run, or the preflight of a preflight-only run)."""
        failed = set(data.get("failures") or {}) | set(data.get("dark") or {})
        for name in data.get("processed") or {}:
            out = self.host(str(name))
            if out.status == PENDING and name not in failed:
                out.status = OK

    def finish(self, canceled: bool, now: float | None = None) -> None:
        """After the playbook: hosts left pending were cancelled (or never got anywhere); a
        cancelled run's time runs to `now` (default: the clock's)."""
        for out in self.hosts.values():
            if out.status == PENDING and canceled and out.started_run:
                span = self._spans.get((out.host, "run"))
                if span:
                    span.append(time.time() if now is None else now)
                    out.timings["run"] = round(max(span) - min(span), 3)
            if out.status == PENDING:
                out.status = CANCELLED if canceled else FAILED
                if not out.message:
                    out.message = "interrupted before it finished" if canceled else \
                        "the playbook ended without an outcome for this host"
