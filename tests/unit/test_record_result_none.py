"""A task returning None keeps the same record result as before the shortcut."""

from django_taskrunner.core.records import encode_value
from django_taskrunner.worker.steps import NULL_JSON


def test_the_shortcut_for_none_is_what_encode_value_gives():
    assert encode_value(None, "result") == (NULL_JSON, None)
