"""Tasks for the workflow tests: they note their runs (and what their parent returned)
in Redis: the chaos counter's when a chaos test runs them in other processes."""

from __future__ import annotations

import json
import os
import time
from typing import Any

from django_taskrunner import task
from django_taskrunner.conf import get_settings
from tests.testapp.chaos_tasks import counter


def wf_key(kind: str) -> str:
    return f"{get_settings().PREFIX}:wf-test:{kind}"


def note(kind: str, value: Any) -> None:
    counter().rpush(wf_key(kind), json.dumps(value))


def noted(kind: str) -> list[Any]:
    return [json.loads(item) for item in counter().lrange(wf_key(kind), 0, -1)]


@task(takes_context=True)
def wf_add(ctx: Any, payload: dict[str, Any]) -> int:
    """Adds `add` to what the step before returned; notes (its name, its parent)."""
    note("order", [payload["name"], ctx.parent_result])
    return (ctx.parent_result or 0) + payload["add"]


@task(max_retry=0)
def wf_fail(payload: Any) -> None:
    note("order", ["fail", None])
    raise ValueError("this step fails for good")


@task(max_retry=2, retry_backoff=0, takes_context=True)
def wf_flaky(ctx: Any, payload: dict[str, Any]) -> int:
    """Fails until attempt `ok_at` (never when ok_at is 0)."""
    counter().hincrby(wf_key("attempts"), str(payload["n"]), 1)
    if not payload["ok_at"] or ctx.attempt < payload["ok_at"]:
        raise ValueError(f"attempt {ctx.attempt} fails")
    return payload["n"]


@task
def wf_member(payload: dict[str, Any]) -> int:
    """A group member: counts its runs per member (`n`), sleeps `sleep`, returns n."""
    if payload.get("sleep"):
        time.sleep(payload["sleep"])
    counter().hincrby(wf_key("member-runs"), str(payload["n"]), 1)
    return payload["n"]


@task(takes_context=True)
def wf_collect(ctx: Any, payload: Any) -> str:
    """A callback: counts its runs, keeps what its parents returned."""
    pipe = counter().pipeline(transaction=False)
    pipe.incr(wf_key("callback-runs"))
    pipe.set(wf_key("callback-parent"), json.dumps(ctx.parent_result))
    pipe.hincrby(wf_key("callback-pids"), str(os.getpid()), 1)
    pipe.execute()
    return "collected"


@task(max_retry=1, retry_backoff=0)
def wf_failing_callback(payload: Any) -> None:
    counter().incr(wf_key("callback-runs"))
    raise RuntimeError("the callback fails")


@task
def wf_blocked(payload: Any) -> None:
    """A step that must never run (its workflow was cancelled or stopped first)."""
    note("order", ["blocked", None])
