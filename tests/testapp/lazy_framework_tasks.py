"""A framework task in an installed app's module that nothing imports at start-up."""

from __future__ import annotations

from django_taskrunner.compat import task
from django_taskrunner.store.connection import get_redis
from tests.testapp.tasks import runs_key


@task
def count() -> None:
    get_redis().hincrby(runs_key(), "framework:lazy", 1)
