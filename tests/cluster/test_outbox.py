"""`tests.integration.test_outbox`, run again on the Redis Cluster (see conftest.py): the
moves' scripts, marks and records in their slots. The outage tests, which start a
single server of their own, stay with the single-server run."""

from tests.integration.test_outbox import (  # noqa: F401
    pytestmark,  # django_db
    test_a_commit_queues_the_task_at_once_and_leaves_no_row,
    test_a_flush_that_crashed_after_redis_took_the_rows_queues_nothing_twice,
    test_a_row_whose_task_is_gone_at_flush_becomes_a_failed_row,
    test_a_task_id_conflict_at_flush_is_recorded_too,
    test_a_unique_conflict_at_flush_is_logged_and_recorded_as_a_failed_row,
    test_flushers_side_by_side_queue_each_row_once,
)
