"""Workflows: signatures (`Task.s`), `chain`, `group`, the stages they make.

A workflow is a list of *stages*, each a list of members: a signature alone is a stage
of one ("one": the next stage starts only when it succeeded), a group a stage of many
("group": the next stage starts when every member finished, succeeded or failed); a
group's `then` callback is a stage of one after it, and a chain is its steps' stages one
after the other. `chain(a, group(b, c, then=d), e)` has the stages [a] [b, c] [d] [e].

A signature is checked where it is written; `.dispatch()` hands the stages to
`core/workflow_dispatch.py`, which builds and sends every member's message. A
dispatched workflow is read back and cancelled by `core/workflow_lookup.py`. A member's
result is its task record's (`core/records.py`); `ctx.parent_result` reads the records
of the stage before.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django_taskrunner.core import clock, due
from django_taskrunner.core import prepare as preparing
from django_taskrunner.core.message import TaskMessage
from django_taskrunner.core.registry import registry
from django_taskrunner.core.workflow_dispatch import dispatch_workflow
from django_taskrunner.core.workflow_lookup import (
    WorkflowHandle,
    WorkflowRecord,
    cancel_workflow,
    lookup_workflow,
    parent_result,
    record_from,
    store,
)
from django_taskrunner.exceptions import InvalidTaskOptions

if TYPE_CHECKING:
    from django_taskrunner.core.task import Task
    from django_taskrunner.core.unique import Claim

__all__ = ["Chain", "Group", "Signature", "WorkflowHandle", "WorkflowRecord", "cancel_workflow",
           "chain", "group", "lookup_workflow",
           # core/workflow_lookup.py's, imported from here by the admin's Workflows pages
           # and the worker's parent_result step.
           "parent_result", "record_from", "store"]

# Options of a signature besides those of `prepare()`: when its message starts.
TIMING_OPTIONS = frozenset({"delay", "when"})


def _option_names(function: Any) -> frozenset[str]:
    return frozenset(name for name, parameter in inspect.signature(function).parameters.items()
                     if parameter.kind is inspect.Parameter.KEYWORD_ONLY)


# The options a signature passes through to `prepare()`: read from its signature, so an
# option another release adds to the dispatch (a priority) is carried without a change.
PREPARE_OPTIONS = _option_names(preparing.prepare) - {"start_ms"}


def _check_options(task_name: str, options: Mapping[str, Any]) -> None:
    known = PREPARE_OPTIONS | TIMING_OPTIONS
    unknown = sorted(set(options) - known)
    if unknown:
        raise InvalidTaskOptions(
            f"unknown option(s) {', '.join(unknown)} for a signature of task {task_name!r}; "
            f"known: {', '.join(sorted(known))}")
    if "delay" in options and "when" in options:
        raise InvalidTaskOptions(f"give delay or when, not both (task {task_name!r})")


def _due_ms(options: Mapping[str, Any], now_ms: int) -> int | None:
    if options.get("delay") is not None:
        return due.due_from_delay(options["delay"], now_ms)
    if options.get("when") is not None:
        return due.due_from_when(options["when"])
    return None


@dataclass(frozen=True)
class Signature:
    """A dispatch described, not done: a task, its payload and dispatch options.

    Built by `Task.s(payload, **options)`; checked at once like `dispatch()` would
    (registered task, JSON payload, options), so a mistake raises where it is written.
    """

    task: Task
    payload: Any = None
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        task = preparing.resolve_task(self.task)
        registry.get(task.name)  # TaskNotFound for a task no worker could run
        object.__setattr__(self, "task", task)
        object.__setattr__(self, "options", dict(self.options))
        _check_options(task.name, self.options)
        if self.plain:  # the payload's checks, without a whole dispatch's preparation
            TaskMessage(id="0" * 32, task_name=task.name, queue="", payload=self.payload
                        ).to_json()
        else:
            self.prepare(clock.now_ms()).to_json()  # InvalidTaskPayload, InvalidTaskOptions

    @property
    def plain(self) -> bool:
        """No option of its own and no lock: its message is the task's template's."""
        return not self.options and not self.task.options.unique

    def prepare(self, now_ms: int) -> TaskMessage:
        """A checked first-attempt message (its claim, if any, through `claim()`)."""
        return self.prepared(now_ms)[0]

    def prepared(self, now_ms: int) -> tuple[TaskMessage, Claim | None]:
        due_ms = self.due_ms(now_ms)
        passed = {name: value for name, value in self.options.items()
                  if name in PREPARE_OPTIONS}
        return preparing.prepare(self.task, self.payload, start_ms=due_ms, **passed)

    def due_ms(self, now_ms: int) -> int | None:
        """When its message may start (its `delay` or `when`); None: at once."""
        return _due_ms(self.options, now_ms)

    @property
    def stages(self) -> list[tuple[str, list[Signature]]]:
        return [("one", [self])]

    def to_dict(self) -> dict[str, Any]:
        """The signature as JSON-ready data; `Signature.from_dict` reads it back."""
        options = dict(self.options)
        for name, value in options.items():
            if callable(value):
                raise InvalidTaskOptions(
                    f"option {name} of a signature of task {self.task.name!r} is a "
                    f"callable, which JSON cannot carry")
        if "delay" in options and not isinstance(options["delay"], int | float):
            options["delay"] = due.delay_seconds(options["delay"])
        if "when" in options:
            options["when"] = options["when"].isoformat()
        return {"task": self.task.name, "payload": self.payload, "options": options}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Signature:
        if not isinstance(data, Mapping) or not isinstance(data.get("task"), str):
            raise InvalidTaskOptions(f"a signature's data needs a task name, not {data!r:.80}")
        options = dict(data.get("options") or {})
        if isinstance(options.get("when"), str):
            options["when"] = datetime.fromisoformat(options["when"])
        return cls(registry.get(data["task"]), data.get("payload"), options)

    def dispatch(self) -> WorkflowHandle:
        """Dispatch this signature as a workflow of one step."""
        return dispatch_workflow(self)

    def __repr__(self) -> str:
        return f"{self.task.name}.s({self.payload!r})"


@dataclass(frozen=True)
class Group:
    """Members that run side by side, and an optional `then` callback run once after
    every member finished for good (succeeded or failed)."""

    members: tuple[Signature, ...]
    then: Signature | None = None

    def __post_init__(self) -> None:
        if not self.members:
            raise InvalidTaskOptions("a group needs at least one member")
        for member in self.members:
            if not isinstance(member, Signature):
                raise InvalidTaskOptions(
                    f"a group's members are signatures (task.s(...)), not "
                    f"{type(member).__name__}")
        if self.then is not None and not isinstance(self.then, Signature):
            raise InvalidTaskOptions(f"a group's then is a signature (task.s(...)), not "
                                     f"{type(self.then).__name__}")

    @property
    def stages(self) -> list[tuple[str, list[Signature]]]:
        stages: list[tuple[str, list[Signature]]] = [("group", list(self.members))]
        if self.then is not None:
            stages.append(("one", [self.then]))
        return stages

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"group": [member.to_dict() for member in self.members]}
        if self.then is not None:
            data["then"] = self.then.to_dict()
        return data

    def dispatch(self) -> WorkflowHandle:
        """Send the members now; the callback once they all finished."""
        return dispatch_workflow(self)


@dataclass(frozen=True)
class Chain:
    """Steps run one after the other: a step starts when the one before succeeded (a
    group: when all its members finished); a step that failed for good ends it."""

    steps: tuple[Signature | Group | Chain, ...]

    def __post_init__(self) -> None:
        if not self.steps:
            raise InvalidTaskOptions("a chain needs at least one step")
        for step in self.steps:
            if not isinstance(step, Signature | Group | Chain):
                raise InvalidTaskOptions(
                    f"a chain's steps are signatures, groups or chains, not "
                    f"{type(step).__name__}")

    @property
    def stages(self) -> list[tuple[str, list[Signature]]]:
        return [stage for step in self.steps for stage in step.stages]

    def to_dict(self) -> dict[str, Any]:
        return {"chain": [step.to_dict() for step in self.steps]}

    def dispatch(self) -> WorkflowHandle:
        """Send the first step now, each next one when the one before finished."""
        return dispatch_workflow(self)


Workflow = Signature | Group | Chain


def chain(*steps: Workflow) -> Chain:
    """Steps (signatures, groups, chains) to run one after the other."""
    return Chain(tuple(steps))


def group(*members: Signature, then: Signature | None = None) -> Group:
    """Signatures to run side by side, then (optionally) one callback."""
    return Group(tuple(members), then)


def from_dict(data: Mapping[str, Any]) -> Workflow:
    """A signature, group or chain from its `to_dict()` data."""
    if "chain" in data:
        return Chain(tuple(from_dict(step) for step in data["chain"]))
    if "group" in data:
        then = data.get("then")
        return Group(tuple(Signature.from_dict(member) for member in data["group"]),
                     None if then is None else Signature.from_dict(then))
    return Signature.from_dict(data)
