"""Django's connection hygiene around each task, as `close_old_connections()` does it,
without walking every database alias twice per task.

Django's request cycle calls `close_old_connections()` at the start and the end of each
request; the executor does so around each task: a connection past its `CONN_MAX_AGE`,
left in a transaction state it should not be in, or broken by an error is closed, so the
next query opens a fresh one. `close_old_connections()` finds this thread's connections
through `connections.all(initialized_only=True)`, which looks each alias up in Django's
thread-local storage: about a tenth of the executor's own work per task.

Here each thread keeps the list that look-up returned (the first check on the thread
makes it) and checks each connection of it with `close_if_unusable_or_obsolete()`, the
very check `close_old_connections()` makes, until Django opens a connection on the thread
(`connection_created`): only then can a connection exist that the list does not hold, so
the next check looks them up again. With `CONN_MAX_AGE` 0 every task opens one, and each
check looks up, as before; a thread that has no connection checks an empty list.
"""

from __future__ import annotations

import threading
from typing import Any

from django.db import connections
from django.db.backends.signals import connection_created

_local = threading.local()


def _opened(sender: Any, connection: Any, **kwargs: Any) -> None:
    """A connection was opened on this thread: look the connections up at the next check."""
    _local.known = None


connection_created.connect(_opened, weak=False, dispatch_uid="django_taskrunner.connections")


def check_connections() -> None:
    """Close this thread's database connections that are unusable or past their age."""
    known = getattr(_local, "known", None)
    if known is None:
        known = _local.known = connections.all(initialized_only=True)
    for connection in known:
        connection.close_if_unusable_or_obsolete()
