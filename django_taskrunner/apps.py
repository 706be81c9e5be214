"""App config: autodiscovers every installed app's `tasks.py` at start-up."""

from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.core.signals import setting_changed
from django.utils.module_loading import autodiscover_modules


def _on_setting_changed(*, setting: str, **kwargs: Any) -> None:
    if setting in ("TASKRUNNER", "CACHES", "BASE_DIR"):
        from django_taskrunner import conf

        conf.reset()


class TaskRunnerConfig(AppConfig):
    name = "django_taskrunner"
    verbose_name = "Task runner"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django_taskrunner import checks  # noqa: F401 - it registers the system checks
        from django_taskrunner.core.registry import registry

        setting_changed.connect(_on_setting_changed, dispatch_uid="django_taskrunner.conf")
        self._connect_periodic_signals()
        autodiscover_modules("tasks", register_to=registry)

    def _connect_periodic_signals(self) -> None:
        """A saved or deleted PeriodicTask tells the leader's scheduler to reload."""
        from django.db.models.signals import post_delete, post_save

        from django_taskrunner.models import PeriodicTask
        from django_taskrunner.scheduling.periodic import announce_change

        for signal in (post_save, post_delete):
            signal.connect(announce_change, sender=PeriodicTask,
                           dispatch_uid=f"django_taskrunner.periodic.{signal is post_save}")
