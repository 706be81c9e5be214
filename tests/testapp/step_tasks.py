"""Fixture tasks for durable steps (`ctx.step`): each step appends `<n>:<step>` to a
Redis list of the test's own, so a test counts how often each step's `fn` ran."""

from __future__ import annotations

from typing import Any

from django_taskrunner import get_redis, task
from django_taskrunner.conf import get_settings


def log_key() -> str:
    return f"{get_settings().PREFIX}:test:steplog"


def logged(n: Any, name: str) -> str:
    """The step body: log that it ran, return a JSON value naming it."""
    get_redis().rpush(log_key(), f"{n}:{name}")
    return f"{name}-of-{n}"


async def alogged(n: Any, name: str) -> str:
    return logged(n, name)


@task(max_retry=3, retry_backoff=0, takes_context=True)
def three_steps(ctx: Any, payload: dict) -> list:
    """Three steps; fails its first attempt after the second step when `fail` is set."""
    n = payload["n"]
    a = ctx.step("a", logged, n, "a")
    b = ctx.step("b", logged, n, name="b")
    if payload.get("fail") and ctx.attempt == 1:
        raise RuntimeError("fails once after its second step")
    c = ctx.step("c", logged, n, "c")
    get_redis().rpush(log_key(), f"{n}:key:{ctx.step_key('a')}")
    return [a, b, c]


@task(max_retry=3, retry_backoff=0, takes_context=True)
async def async_three_steps(ctx: Any, payload: dict) -> list:
    n = payload["n"]
    a = await ctx.step("a", alogged, n, "a")
    b = await ctx.step("b", alogged, n, "b")
    if ctx.attempt == 1:
        raise RuntimeError("fails once after its second step")
    c = await ctx.step("c", alogged, n, "c")
    return [a, b, c]


@task(max_retry=1, retry_backoff=0, takes_context=True)
def bad_step(ctx: Any, payload: dict) -> None:
    """A step of a given kind of misuse: `value` (not JSON), `twice`, `long` or `empty`."""
    kind = payload["kind"]
    if kind == "value":
        ctx.step("s", lambda: {1, 2})
    elif kind == "twice":
        ctx.step("s", logged, kind, "s")
        ctx.step("s", logged, kind, "s")
    elif kind == "long":
        ctx.step("x" * 201, logged, kind, "s")
    else:
        ctx.step("", logged, kind, "s")


@task(max_retry=2, retry_backoff=0, takes_context=True)
def raising_step(ctx: Any, payload: dict) -> str:
    """A step whose fn raises on the first attempt: nothing is kept, it runs again."""
    def body() -> str:
        logged(payload["n"], "r")
        if ctx.attempt == 1:
            raise RuntimeError("the step fails")
        return "done"
    return ctx.step("r", body)


def allow_key() -> str:
    return f"{get_settings().PREFIX}:test:steps-allowed"


@task(max_retry=0, takes_context=True)
def fails_until_allowed(ctx: Any, payload: dict) -> list:
    """Two steps, then fails for good until `allow_key()` is set (then a third step)."""
    n = payload["n"]
    done = [ctx.step("a", logged, n, "a"), ctx.step("b", logged, n, "b")]
    if not get_redis().exists(allow_key()):
        raise RuntimeError("not allowed yet")
    return [*done, ctx.step("c", logged, n, "c")]


def age_steps(task_id: str, seconds: int) -> None:
    """Leave the steps of `task_id` `seconds` to live, as if the time had passed."""
    from django_taskrunner.store import keys

    get_redis().expire(keys.steps_key(get_settings().PREFIX, task_id), seconds)


@task(max_retry=3, retry_backoff=3600, takes_context=True)
def retries_late(ctx: Any, payload: dict) -> str:
    """Keeps step "a", then (first attempt) leaves its steps 30 s to live and fails: its
    retry is due in an hour."""
    a = ctx.step("a", logged, payload["n"], "a")
    if ctx.attempt == 1:
        age_steps(ctx.id, 30)
        raise RuntimeError("fails its first attempt")
    return a


@task(takes_context=True)
def html_step(ctx: Any, payload: dict) -> None:
    """One step whose result holds markup, for the admin page's escaping."""
    ctx.step("markup", lambda: {"html": "<script>alert(1)</script>"})


# -- the chaos suite's (tests/chaos/test_steps_crash.py): logs in the chaos counter Redis

def chaos_step_key(kind: str) -> str:
    return f"{get_settings().PREFIX}:chaos:steps:{kind}"


def chaos_logged(n: int, name: str, sleep: float) -> str:
    """A step body: mark its entry, work a little, append to the log (the side effect)."""
    import os
    import time

    from tests.testapp.chaos_tasks import counter

    entry = f"{n}:{name}:{os.getpid()}"
    counter().rpush(chaos_step_key("enter"), entry)
    time.sleep(sleep)
    counter().rpush(chaos_step_key("log"), entry)
    return name


@task(max_retry=2, retry_backoff=0, takes_context=True)
def chaos_three_steps(ctx: Any, payload: dict) -> None:
    """Three logged steps; fails once (per task, whatever its attempt) after the second."""
    from tests.testapp.chaos_tasks import counter

    n, sleep = payload["n"], payload.get("sleep", 0.0)
    ctx.step("a", chaos_logged, n, "a", sleep)
    ctx.step("b", chaos_logged, n, "b", sleep)
    if counter().hsetnx(chaos_step_key("failed-once"), n, 1):
        raise RuntimeError("fails once after its second step")
    ctx.step("c", chaos_logged, n, "c", sleep)
    counter().sadd(chaos_step_key("done"), n)


@task(max_retry=2, retry_backoff=0, takes_context=True)
def chain_step(ctx: Any, payload: dict) -> int:
    """A chain member whose one step has the same name in every member; with `fail`, its
    first attempt fails after the step."""
    ctx.step("same", logged, payload["n"], "same")
    get_redis().rpush(log_key(), f"{payload['n']}:parent:{ctx.parent_result}")
    if payload.get("fail") and ctx.attempt == 1:
        raise RuntimeError("fails once after its step")
    return (ctx.parent_result or 0) + payload["add"]


@task(max_retry=0, takes_context=True)
async def async_bad_step(ctx: Any, payload: dict) -> None:
    """An async step whose result is not JSON, or (`twice`) a name used twice."""
    async def value() -> Any:
        return {1, 2} if payload["kind"] == "value" else "ok"

    await ctx.step("s", value)
    if payload["kind"] == "twice":
        await ctx.step("s", value)
