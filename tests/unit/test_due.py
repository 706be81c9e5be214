"""Due times from `delay` and `when`: types, time zones and daylight-saving changes."""

from __future__ import annotations

import math
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.utils import timezone

from django_taskrunner import InvalidTaskOptions
from django_taskrunner.core.dispatch import due_from_delay, due_from_when


def test_a_delay_is_seconds_or_a_timedelta():
    assert due_from_delay(1.5, 1_000) == 2_500
    assert due_from_delay(timedelta(minutes=1), 0) == 60_000
    assert due_from_delay(-3, 10_000) == 7_000


@pytest.mark.parametrize("bad", ["5", True, None, [1], date(2030, 1, 1)])
def test_a_delay_of_another_type_is_a_type_error(bad):
    with pytest.raises(TypeError, match="delay must be a number of seconds"):
        due_from_delay(bad, 0)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, 1e300])
def test_a_delay_that_is_not_finite_or_absurd_is_refused(bad):
    with pytest.raises(InvalidTaskOptions):
        due_from_delay(bad, 0)


def test_an_aware_when_keeps_its_instant():
    when = datetime(2030, 6, 1, 12, 0, tzinfo=ZoneInfo("America/New_York"))
    assert due_from_when(when) == int(when.timestamp() * 1000)


@pytest.mark.parametrize("bad", ["2030-01-01", date(2030, 1, 1), 1893456000, None])
def test_a_when_that_is_not_a_datetime_is_a_type_error(bad):
    with pytest.raises(TypeError, match="when must be a datetime"):
        due_from_when(bad)


def test_a_naive_when_is_read_in_the_current_time_zone():
    naive = datetime(2030, 6, 1, 12, 0)
    with timezone.override("Asia/Tokyo"):
        due = due_from_when(naive)
    assert due == int(datetime(2030, 6, 1, 3, 0, tzinfo=UTC).timestamp() * 1000)


def test_a_naive_when_in_the_hour_skipped_by_dst_is_refused():
    with timezone.override("Europe/Paris"), pytest.raises(InvalidTaskOptions,
                                                           match="does not exist"):
        due_from_when(datetime(2026, 3, 29, 2, 30))


def test_a_naive_when_in_the_hour_repeated_by_dst_is_refused():
    with timezone.override("Europe/Paris"), pytest.raises(InvalidTaskOptions,
                                                           match="is ambiguous"):
        due_from_when(datetime(2026, 10, 25, 2, 30))


def test_an_aware_when_in_the_repeated_hour_is_accepted():
    when = datetime(2026, 10, 25, 2, 30, tzinfo=ZoneInfo("Europe/Paris"), fold=1)
    assert due_from_when(when) == int(datetime(2026, 10, 25, 1, 30, tzinfo=UTC).timestamp()
                                      * 1000)
