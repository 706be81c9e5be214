"""A dispatched workflow read back and cancelled: its handle, its record, the results
of a stage for `ctx.parent_result`.

Everything here reads (or cancels) what `core/workflow_dispatch.py` wrote, through
`store/workflows.py`; nothing here builds a workflow.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django_taskrunner.conf import get_settings
from django_taskrunner.core import clock
from django_taskrunner.core.records import cancel, json_value
from django_taskrunner.store.broker import get_broker
from django_taskrunner.store.connection import built_client
from django_taskrunner.store.errors import REDIS_DOWN, unavailable
from django_taskrunner.store.workflows import WorkflowStore

__all__ = ["WorkflowHandle", "WorkflowRecord", "cancel_workflow", "lookup_workflow",
           "parent_result", "record_from", "store"]


@dataclass(frozen=True)
class WorkflowHandle:
    """A dispatched workflow: its id, and its members' task ids, stage after stage."""

    id: str
    task_ids: tuple[str, ...]

    def lookup(self) -> WorkflowRecord | None:
        return lookup_workflow(self.id)

    def cancel(self) -> bool:
        return cancel_workflow(self.id)


@dataclass(frozen=True)
class WorkflowRecord:
    """What is known of one workflow.

    `status`: running | succeeded (every member succeeded) | finished (done, some
    group members failed) | failed (a one-task step failed for good, `failed_step`) |
    cancelled. Counts: `pending` (in a stage not sent yet), `running` (sent: queued or
    running), `succeeded`, `failed` (for good: failed, expired or cancelled).
    """

    id: str
    status: str
    name: str
    stage: int
    stages: int
    total: int
    pending: int
    running: int
    succeeded: int
    failed: int
    failed_step: int | None
    task_ids: tuple[str, ...]
    stage_sizes: tuple[int, ...]
    callback_id: str | None
    dispatched_at: datetime | None
    finished_at: datetime | None

    @property
    def finished(self) -> bool:
        return self.status != "running"


def store() -> WorkflowStore:
    broker = get_broker()
    return WorkflowStore(broker.client, broker.prefix)


def _int(fields: Mapping[str, str], name: str, default: int = 0) -> int:
    raw = fields.get(name, "")
    try:
        return int(raw)
    except ValueError:
        return default


def _time(fields: Mapping[str, str], name: str) -> datetime | None:
    raw = _int(fields, name, -1)
    return None if raw < 0 else datetime.fromtimestamp(raw / 1000, tz=UTC)


def record_from(workflow_id: str, fields: Mapping[str, str],
                task_ids: Iterable[str] = ()) -> WorkflowRecord:
    """A `WorkflowRecord` from the workflow's hash fields (and its member ids)."""
    stages = _int(fields, "stages")
    sizes = tuple(_int(fields, f"n:{stage}") for stage in range(stages))
    ids = tuple(task_ids)
    callback = None
    if (stages >= 2 and fields.get(f"kind:{stages - 1}") == "one"
            and fields.get(f"kind:{stages - 2}") == "group" and ids):
        callback = ids[-1]
    failed_step = fields.get("failed_step")
    return WorkflowRecord(
        id=workflow_id, status=fields.get("status", ""), name=fields.get("name", ""),
        stage=_int(fields, "stage"), stages=stages, total=_int(fields, "total"),
        pending=_int(fields, "pending"), running=max(0, _int(fields, "running")),
        succeeded=_int(fields, "succeeded"), failed=_int(fields, "failed"),
        failed_step=None if failed_step is None else _int(fields, "failed_step"),
        task_ids=ids, stage_sizes=sizes, callback_id=callback,
        dispatched_at=_time(fields, "created"), finished_at=_time(fields, "finished"))


def _checked(workflow_id: Any) -> str | None:
    if isinstance(workflow_id, str) and workflow_id.isalnum() and len(workflow_id) <= 64:
        return workflow_id
    return None


def lookup_workflow(workflow_id: str, *, with_task_ids: bool = True) -> WorkflowRecord | None:
    """The record of a workflow; None for an unknown id, or one whose record expired.

    Raises:
        RedisUnavailable: Redis could not be reached.
    """
    checked = _checked(workflow_id)
    if checked is None:
        return None
    try:
        workflows = store()
        fields = workflows.load(checked)
        if fields is None:
            return None
        ids = workflows.members(checked, 0, -1) if with_task_ids else []
    except REDIS_DOWN as exc:
        raise unavailable(f"cannot look workflow {checked!r} up", exc, built_client()) from exc
    return record_from(checked, fields, ids)


def cancel_workflow(workflow_id: str) -> bool:
    """Cancel a running workflow: no later stage is sent, and each member not finished
    yet (queued, running, or waiting for its stage) is cancelled as `cancel(id)` does.
    False for an unknown or finished workflow.

    Raises:
        RedisUnavailable: Redis could not be reached.
    """
    checked = _checked(workflow_id)
    if checked is None:
        return False
    try:
        workflows = store()
        outcome, stage = workflows.cancel(checked, clock.now_ms(),
                                          max(1, int(get_settings().RESULT_TTL)))
        if outcome != "ok":
            return False
        fields = workflows.load(checked) or {}
        start = _int(fields, f"o:{_int(fields, 'stage', int(stage or 0))}")
        ids = workflows.members(checked, start, -1)
        done = workflows.done(checked, list(range(start, start + len(ids))))
    except REDIS_DOWN as exc:
        raise unavailable(f"cannot cancel workflow {checked!r}", exc, built_client()) from exc
    for task_id, finished in zip(ids, done, strict=True):
        if not finished:
            cancel(task_id)
    return True


def parent_result(workflows: WorkflowStore, workflow: Mapping[str, Any]) -> Any:
    """What a member's stage before returned: the step's result, or a group's results
    in order (None for a member that failed); None for the first stage. Read from the
    task records of that stage."""
    stage = workflow.get("k", 0)
    if not stage:
        return None
    fields = workflows.load(workflow["id"])
    if fields is None:
        return None
    before = stage - 1
    offset, size = _int(fields, f"o:{before}"), _int(fields, f"n:{before}")
    ids = workflows.members(workflow["id"], offset, offset + size - 1)
    results = [json_value(result) if status == "succeeded" else None
               for status, result in workflows.record_fields(ids, ("s", "r"))]
    if fields.get(f"kind:{before}") == "one":
        return results[0] if results else None
    return results
