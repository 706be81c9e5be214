"""The holder: the value a dispatch writes to its unique lock and task_id key.

The message id, `#`, and a token drawn for that dispatch (`holder_value`). The id alone
cannot tell two dispatches of one `task_id` apart, and the stale run of the first (a
stalled worker, resumed after another one reclaimed and finished it) would free the
second's lock and reservation; every release compares the whole value first. Errors
and the admin show the id alone (`holder_id`).
"""

from __future__ import annotations

import os

from django_taskrunner.core.message import DISPATCH_TOKEN, TaskMessage

# Joins the id and the dispatch token in a lock's value; a token never contains it.
HOLDER_SEPARATOR = "#"


def new_dispatch_token() -> str:
    """16 random hex digits: one dispatch's mark on the lock and task_id it takes."""
    return os.urandom(8).hex()


def holder_value(message: TaskMessage) -> str:
    """What `message` writes to its lock and task_id key, and what its release compares.

    A message queued by an earlier version has no token: its id alone, as it wrote then.
    """
    token = message.dispatch_token
    return message.id if token is None else f"{message.id}{HOLDER_SEPARATOR}{token}"


def holder_id(value: str) -> str:
    """The task id in a lock's or reservation's value: what errors and the admin show."""
    task_id, separator, token = value.rpartition(HOLDER_SEPARATOR)
    if separator and task_id and DISPATCH_TOKEN.fullmatch(token):
        return task_id
    return value
