"""`tests.django.test_taskrunner_stats_command`, run again on the Redis Cluster
(see conftest.py)."""

from tests.django.test_taskrunner_stats_command import *  # noqa: F403
