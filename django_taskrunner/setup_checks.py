"""System checks of what surrounds the settings: packages a setting needs, and what
`check --deploy` should warn about. Apart from conf.py because they read the merged
settings through `conf`, which itself validates through conf.py."""

from __future__ import annotations

from typing import Any

from django.conf import settings as django_settings
from django.core.checks import CheckMessage, Tags, Warning, register
from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError

from django_taskrunner.conf import default_embedded_dir, error, get_settings, user_settings
from django_taskrunner.core import outbox_rows


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
