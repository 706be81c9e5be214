"""Loads the Lua scripts in `lua/` once and runs them by EVALSHA.

Each script's first line says whether it is cluster-safe (`-- Cluster-safe: yes`: every
key it touches is in one hash slot, passed in KEYS or named from an ARGV prefix with the
same hash tag) and why, or when only as the store calls it on a cluster (`yes with`,
`yes without`), or when it is not (`no`: a single server only, and what the store does
instead on a cluster). tests/unit/test_lua_scripts.py reads each claim against its
script, tests/cluster/test_lua_slots.py tries the ARGV-named ones on a cluster.

A piece two scripts share has one source: a part in `lua/parts/`, put in where a script
says `-- include: <part>.lua` when the script is loaded (`source`): the purges' loop,
the limits' waiting line, the moves' reply (promote_due, fair_feed), the server's time
in ms, and the record-writing rules (what is final and the waking of `wait()`, a new
record, the finished index's trim).

On a cluster, redis-py's `Script` sends EVALSHA to the node owning the keys' slot and, on
NOSCRIPT (a node that never saw it, such as a replica promoted by a failover), loads it
on every master and tries again. A cluster *pipeline* could not load a missing script
half way through its nodes' parts (redis-py blocks its `evalsha()` method for that
reason), so there the script text goes with the call (EVAL), without its comments: a few
hundred bytes, and nothing to be missing.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from redis.client import Pipeline
from redis.cluster import ClusterPipeline, RedisCluster
from redis.commands.core import Script
from redis.exceptions import NoScriptError

from django_taskrunner.store.connection import thread_connections

SCRIPT_DIR = Path(__file__).with_name("lua")
PART_DIR = SCRIPT_DIR / "parts"
INCLUDE = re.compile(r"^-- include: ([\w-]+\.lua)$", re.MULTILINE)


@functools.cache
def source(name: str) -> str:
    """The text of `lua/<name>.lua`, each `-- include: <part>.lua` line replaced by the
    text of `lua/parts/<part>.lua`."""
    text = (SCRIPT_DIR / f"{name}.lua").read_text(encoding="utf-8")
    return INCLUDE.sub(lambda found: part(found.group(1)).rstrip("\n"), text)


def part(file_name: str) -> str:
    """The text of the shared part `lua/parts/<file_name>`."""
    return (PART_DIR / file_name).read_text(encoding="utf-8")


@functools.cache
def compact_source(name: str) -> str:
    """The script without its comment lines and blank lines (what EVAL sends)."""
    lines = source(name).splitlines()
    return "\n".join(line for line in lines if line.strip() and not line.lstrip().startswith("--"))


@functools.cache
def _script(name: str) -> Script:
    # A Script keeps its SHA; redis-py sends EVALSHA and loads it on NOSCRIPT.
    return Script(None, source(name).encode("utf-8"))


def run(client: Any, name: str, keys: list[Any], args: list[Any]) -> Any:
    """Run script `name` on `client` (a client or a pipeline, plain or cluster).

    On a plain client (not a pipeline, not a cluster) a bare EVALSHA, and on NOSCRIPT
    SCRIPT LOAD and the EVALSHA again, which is what redis-py's `Script` does there, at
    a tenth of its Python cost (about 3 µs a call: a dispatch's share of its record).
    """
    kind = _client_kind(type(client))
    if kind == "cluster pipeline":
        return client.execute_command("EVAL", compact_source(name), len(keys), *keys, *args)
    if kind == "script":
        return _script(name)(keys=keys, args=args, client=client)
    sha = _script(name).sha
    try:
        return client.execute_command("EVALSHA", sha, len(keys), *keys, *args)
    except NoScriptError:
        client.script_load(source(name))
        return client.execute_command("EVALSHA", sha, len(keys), *keys, *args)


@functools.cache
def _client_kind(kind: type) -> str:
    """How `run()` sends a script on a client of this class, asked once per class (an
    isinstance check against redis-py's pipeline classes costs about 1 µs)."""
    if issubclass(kind, ClusterPipeline):
        return "cluster pipeline"
    if issubclass(kind, (Pipeline, RedisCluster)):
        return "script"
    return "plain"


def queue(pipe: Any, name: str, keys: list[Any], args: list[Any]) -> None:
    """Queue script `name` on a pipeline as a bare EVALSHA (EVAL on a cluster pipeline).

    `run()` on a pipeline makes redis-py ask SCRIPT EXISTS first, one more round trip
    per pipeline; this skips it, for the hot paths (the acker's batch). The caller runs
    `execute_loading()`, which loads the script and sends the batch again on NOSCRIPT.
    """
    if _client_kind(type(pipe)) == "cluster pipeline":
        pipe.execute_command("EVAL", compact_source(name), len(keys), *keys, *args,
                             **_node_of(pipe, keys))
    else:
        pipe.execute_command("EVALSHA", _script(name).sha, len(keys), *keys, *args)


def _node_of(pipe: ClusterPipeline, keys: list[Any]) -> dict[str, Any]:
    """The node of the script's slot, named up front: without it redis-py (8.x) asks the
    server which of an EVAL's arguments are keys (COMMAND GETKEYS), one more round trip
    per script of the pipeline. A MOVED reply still sends it on to the new owner."""
    return {"target_nodes": pipe.get_node_from_key(keys[0])} if keys else {}


def execute_loading(client: Any, build: Callable[[Any], None], names: Sequence[str]) -> list[Any]:
    """Build a batch with `build(batch)` and send it in one round trip (on the calling
    thread's own connection where the client allows, `connection.thread_connections`,
    else a pipeline); on NOSCRIPT (a server that has not seen a script `queue()`d, e.g.
    after a restart) load `names` and send it again. Raises the first error reply, as a
    redis-py pipeline does; returns the replies.

    Only for batches that are safe to send twice (acks, requeues, record writes are).
    """
    return raise_first(send_loading(thread_connections(client), build, names))


def send_loading(sender: Any, build: Callable[[Any], None], names: Sequence[str]) -> list[Any]:
    """`execute_loading` on `sender` (`thread_connections`), each error kept as its reply.

    A thread's own connection loads the scripts of `names` it has not loaded since it
    connected in the batch's round trip (`ThreadConnections.send_batch`). NOSCRIPT is
    left for a server whose scripts were flushed under an open connection (SCRIPT
    FLUSH), or a sentinel's pooled connection: there the batch went in part, and the
    resend applies the rest (every item is safe to send twice)."""
    batch = sender.batch()
    build(batch)
    replies = sender.send_batch(batch, names, source)
    if any(isinstance(reply, NoScriptError) for reply in replies):
        batch = sender.batch()
        build(batch)
        replies = sender.send_batch(batch, names, source, reload=True)
    return replies


def raise_first(replies: list[Any]) -> list[Any]:
    """The replies, unless one is an error: then that error (the first)."""
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return replies
