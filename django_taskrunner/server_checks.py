"""The server check (`taskrunner.E020`): can the configured Redis run the app?

A deployment check (`manage.py check --deploy`), because it talks to the server: plain
`manage.py check` stays offline, as Django's own database checks do. `runtasks` runs
the same check (store/server.py) at every start. Kept out of conf.py, which
`conf.get_settings()` imports: this module needs the connection, which needs conf.
"""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Error, register
from django.core.checks import Warning as CheckWarning

from django_taskrunner.store import get_store
from django_taskrunner.store.errors import REDIS_DOWN
from django_taskrunner.store.server import ServerUnsupported


@register("taskrunner_server", deploy=True)
def check_taskrunner_server(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Error when the server is too old or lacks streams or EVALSHA; warn when unreachable."""
    try:
        get_store().server.check()
    except ServerUnsupported as exc:
        return [Error(str(exc), obj="settings.TASKRUNNER", id="taskrunner.E020")]
    except REDIS_DOWN as exc:
        return [CheckWarning(f"cannot reach the Redis server to check it: {exc}",
                             obj="settings.TASKRUNNER", id="taskrunner.W020")]
    return []
