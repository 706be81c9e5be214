"""`store.scripts.run`: a bare EVALSHA on a plain client, loading the script once when the
server lost it (a restart), and redis-py's `Script` on a pipeline; each runs a script
exactly once."""

from __future__ import annotations

from typing import Any

from django_taskrunner.store import scripts


def add_one(client: Any, stream: str, record: str) -> Any:
    """record_add.lua with one message: an XADD and its record (see the script)."""
    return scripts.run(client, "record_add", [stream, record],
                       ["m", '[["60", ["s", "queued"]]]', "", "body"])


def test_a_plain_client_loads_a_script_the_server_lost_and_runs_it_once(r, prefix):
    stream, record = f"{prefix}:{{q}}:stream", f"{prefix}:record:{{x}}"
    r.script_flush()

    [stream_id] = add_one(r, stream, record)

    assert r.xlen(stream) == 1  # NOSCRIPT, SCRIPT LOAD, one EVALSHA that ran
    assert r.hget(record, "sid").decode() == stream_id.decode()
    assert r.script_exists(scripts._script("record_add").sha) == [True]
    add_one(r, stream, record)
    assert r.xlen(stream) == 2


def test_a_pipeline_queues_the_script_and_runs_it_once(r, prefix):
    stream, record = f"{prefix}:{{q}}:stream", f"{prefix}:record:{{x}}"
    r.script_flush()
    pipe = r.pipeline(transaction=False)

    add_one(pipe, stream, record)
    [[stream_id]] = pipe.execute()

    assert r.xlen(stream) == 1
    assert r.hget(record, "sid").decode() == stream_id.decode()
