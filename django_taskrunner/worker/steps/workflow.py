"""Workflow members: count a member's final outcome, and read its parent's result.

No step of its own and no round trip of its own: `write_outcome` (the record step) calls
`note_outcome` for a message that carries a workflow field, and the member's completion
(`store/workflows.py`, `workflow_member.lua`) goes to the acker with its ack, after its
task record in the same batch. A task outside any workflow pays one field check.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django_taskrunner.core.message import TaskMessage
from django_taskrunner.core.workflows import parent_result
from django_taskrunner.store.workflows import MemberDone
from django_taskrunner.worker.steps.run import Run

if TYPE_CHECKING:
    from django_taskrunner.worker.executor import Executor

# A record's final status -> how the workflow counts it (a retry is not final).
OUTCOMES = {"succeeded": "succeeded", "failed": "failed", "expired": "failed",
            "cancelled": "failed"}


def note_outcome(executor: Executor, run: Run, status: str) -> None:
    """Hand a workflow member's final outcome to the acker (its batch counts it)."""
    message = run.message
    outcome = OUTCOMES.get(status)
    if message is None or message.workflow is None or outcome is None:
        return
    workflow = message.workflow
    executor.workflow(MemberDone(workflow["id"], workflow["j"], workflow["k"], outcome,
                                 tuple(workflow.get("nx", ())), max(1, executor.result_ttl)))


def parent_reader(executor: Executor, message: TaskMessage) -> Callable[[], Any]:
    """`ctx.parent_result`'s reader for `message` (None outside a workflow)."""
    workflow = message.workflow
    if workflow is None:
        return lambda: None
    store = executor.broker.store.workflows
    return lambda: parent_result(store, workflow)
