"""A framework task in an installed app's module that nothing imports at start-up."""

from __future__ import annotations

from django_taskrunner import get_redis
from django_taskrunner.compat import task
from tests.testapp.tasks import runs_key


@task
def count() -> None:
    get_redis().hincrby(runs_key(), "framework:lazy", 1)
