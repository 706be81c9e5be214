"""`tests.django.test_delayed_admin`, run again on the Redis Cluster (see conftest.py)."""

from tests.django.test_delayed_admin import *  # noqa: F403
