"""What a stream entry holds: one field (`keys.ENTRY_FIELD`) with the message's JSON,
read back with its task id.

A plain dispatch adds its message without an id (wire version 2, core/message.py): the
task id is the entry's own (`entry_task_id`), known only from the XADD's reply.
Every reader of entries (a worker's fetch and claims, the admin's pages, `lookup()`)
takes bodies through `entry_body`, which puts that id in, so a decoded message always
has its id, and a body a worker copies to a new entry (a retry, a put-back at stop, a
limit's wait) keeps the id it was dispatched with.
"""

from __future__ import annotations

import re

from django_taskrunner.store import keys

# A message without its id (wire version 2), and one that has it.
WITHOUT_ID = b'{"v":2,'
_WITH_ID = b'{"v":2,"id":'
# A plain dispatch's task id: `<stream id>@<stream name>` (the queue, shard or priority
# level it was added to). A caller's `task_id` may not take this shape.
_STREAM_ID = r"\d{1,20}-\d{1,20}"
_ENTRY_TASK_ID = re.compile(rf"({_STREAM_ID})@([A-Za-z0-9_][A-Za-z0-9._#!-]{{0,120}})")
# The start of a body whose task id names an entry: the id comes first after the version
# in every body this package writes (`TaskMessage.to_json`, `entry_body`).
_NAMED = re.compile(rb'\{"v":[12],"id":"' + _STREAM_ID.encode() + rb"@")


def entry_task_id(stream: str, stream_id: str) -> str:
    """The task id of the message added to `stream` (a queue, shard or level name) as
    entry `stream_id`."""
    return f"{stream_id}@{stream}"


def task_id_entry(task_id: str) -> tuple[str, str] | None:
    """(stream name, stream id) of an entry-named task id, else None."""
    found = _ENTRY_TASK_ID.fullmatch(task_id) if "@" in task_id else None
    return None if found is None else (found.group(2), found.group(1))


def entry_body(stream: str, stream_id: str,
               fields: dict[bytes, bytes] | list[bytes] | None) -> bytes | None:
    """`body_of(fields)`, with the task id put in when the message has none: `stream` is
    the queue, shard or level name the entry was read from."""
    body = body_of(fields)
    if body is not None and body.startswith(WITHOUT_ID) and not body.startswith(_WITH_ID):
        named = entry_task_id(stream, stream_id).encode()
        body = b'%s"id":"%s",%s' % (WITHOUT_ID, named, body[len(WITHOUT_ID):])
    return body


def body_of(fields: dict[bytes, bytes] | list[bytes] | None) -> bytes | None:
    """The message body of an entry (its fields as redis-py's callbacks give them, or
    the raw field, value list); None for an entry deleted while pending.

    An entry written by something else (no `m` field) yields its fields as text, which
    the worker then records as an undecodable message.
    """
    if not fields:
        return None
    if isinstance(fields, list):
        fields = dict(zip(fields[::2], fields[1::2], strict=False))
    body = fields.get(keys.ENTRY_FIELD)
    return body if body is not None else repr(fields).encode()


def names_its_entry(body: bytes | str) -> bool:
    """Whether `body` is a message whose task id names a stream entry (a plain
    dispatch's, read back): a quick look at its start, no decoding."""
    head = body[:64]
    return _NAMED.match(head if isinstance(head, bytes) else head.encode()) is not None
