"""The app's Django system checks: every `TASKRUNNER` value (`taskrunner.E000`...), what
surrounds the settings (packages a setting needs, what `check --deploy` should warn
about) and the server (`taskrunner.E020`: can the configured Redis run the app?).

The value checks themselves live in `conf.py`, which `get_settings()` also runs; these
are the checks Django runs at start-up. The server check is a deployment check, because
it talks to the server: plain `manage.py check` stays offline, as Django's own database
checks do. `runtasks` runs the same check (store/server.py) at every start.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings as django_settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.core.checks import Warning as CheckWarning
from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError

from django_taskrunner.conf import (
    check_connection_alias,
    default_embedded_dir,
    error,
    get_settings,
    user_settings,
    validate_settings,
)
from django_taskrunner.core import outbox_rows
from django_taskrunner.store import get_store
from django_taskrunner.store.errors import REDIS_DOWN
from django_taskrunner.store.server import ServerUnsupported


@register(Tags.compatibility)
def check_connection_needs_django_redis(app_configs: Any = None,
                                        **kwargs: Any) -> list[CheckMessage]:
    """`CONNECTION` borrows a django-redis cache's client: an optional dependency (the
    `django-redis` extra), so say so at start-up rather than fail at the first dispatch."""
    if not user_settings().get("CONNECTION"):
        return []
    try:
        import django_redis  # noqa: F401
    except ImportError:
        pass
    else:
        return []
    return [error("TASKRUNNER['CONNECTION'] needs the django-redis package, which is not "
                   "installed", "taskrunner.E007",
                   hint='pip install "django-taskrunner[django-redis]", or set REDIS_URL')]


@register(Tags.compatibility, deploy=True)
def check_embedded_redis_in_production(app_configs: Any = None,
                                       **kwargs: Any) -> list[CheckMessage]:
    """`check --deploy`: with DEBUG off and no Redis configured, the site runs on the
    embedded server, private to this machine; fine for a demo, rarely what production
    meant (one machine only, no replica, data in the project folder)."""
    raw = user_settings()
    if django_settings.DEBUG or any(raw.get(key) for key in ("REDIS_URL", "CONNECTION",
                                                       "CLUSTER_NODES")):
        return []
    data_dir = raw.get("EMBEDDED_DIR") or default_embedded_dir()
    return [Warning(
        f"django-taskrunner runs on the embedded Redis (data in {data_dir}): no REDIS_URL, "
        f"CONNECTION or CLUSTER_NODES is set in TASKRUNNER",
        hint="point TASKRUNNER['REDIS_URL'] at your Redis server; the embedded one serves "
             "only this machine and keeps its data in the project folder",
        id="taskrunner.W001")]


@register(Tags.database)
def check_outbox_age(app_configs: Any = None, databases: Any = None,
                     **kwargs: Any) -> list[CheckMessage]:
    """`check --database default` (and `migrate`): warn when outbox rows have waited
    longer than OUTBOX_WARN_AGE: Redis down, or no worker leading to flush them."""
    if not databases:
        return []
    try:
        limit = float(get_settings().OUTBOX_WARN_AGE)
    except ImproperlyConfigured:
        return []  # the settings checks report what is wrong
    warnings: list[CheckMessage] = []
    for alias in databases:
        try:
            figures = outbox_rows.figures(alias)
        except DatabaseError:
            continue  # not migrated yet: migrate's own checks come first
        if figures.count and figures.oldest_age > limit:
            warnings.append(Warning(
                f"{figures.count} task(s) wait in the outbox of database {alias!r}; the oldest "
                f"for {figures.oldest_age:.0f} s (OUTBOX_WARN_AGE is {limit:g} s)",
                hint="is Redis reachable, and does a `runtasks` worker run (its leader moves "
                     "the rows)? See docs/outbox.md",
                id="taskrunner.W030"))
    return warnings

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


def _check_handler_paths(raw: dict[str, Any]) -> list[CheckMessage]:
    from django.utils.module_loading import import_string

    errors: list[CheckMessage] = []
    for key in ("FAILED_TASK_HANDLER", "LONG_QUEUE_HOOK"):
        path = raw.get(key)
        if not isinstance(path, str):
            continue
        try:
            target = import_string(path)
        except ImportError as exc:
            errors.append(
                error(f"TASKRUNNER[{key!r}] cannot be imported: {exc}", "taskrunner.E008"))
            continue
        if not callable(target):
            errors.append(
                error(f"TASKRUNNER[{key!r}] = {path!r} is not callable", "taskrunner.E008"))
    return errors


@register(Tags.compatibility)
def check_taskrunner_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Django system check: report every bad `TASKRUNNER` value at start-up."""
    raw = getattr(django_settings, "TASKRUNNER", {})
    errors = validate_settings(raw)
    if isinstance(raw, dict):
        raw = dict(raw)
        errors += check_connection_alias(raw) + _check_handler_paths(raw)
    return errors
