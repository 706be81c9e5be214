"""The autoscaler's decisions, from figures alone (no Redis, no threads, a given clock)."""

from __future__ import annotations

import pytest

from django_taskrunner.worker.pool import ScalingPolicy, decide, default_tolerance, wanted_size

POLICY = ScalingPolicy(min_workers=1, max_workers=16, desired_wait=1.0, tolerance=0.5,
                       cooldown=10.0)


def test_a_wait_above_the_band_grows_the_pool_to_what_brings_it_back_to_the_goal():
    # 1 thread, 2,000 tasks of 20 ms ahead: 40 s of wait; 40 threads would make it 1 s
    assert wanted_size(POLICY, 1, 40.0) == 16  # capped at max_workers
    assert wanted_size(POLICY, 2, 3.0) == 6
    assert wanted_size(POLICY, 4, 1.6) == 7  # ceil(4 x 1.6)


def test_a_wait_just_above_the_band_grows_by_at_least_one_thread():
    assert wanted_size(POLICY, 1, 1.51) == 2
    policy = ScalingPolicy(min_workers=1, max_workers=16, desired_wait=10.0, tolerance=0.1,
                           cooldown=0)
    assert wanted_size(policy, 10, 10.11) == 11  # ceil(10.11) would be no change


def test_a_wait_inside_the_band_keeps_the_size():
    for wait in (0.5, 0.9, 1.0, 1.5):
        assert wanted_size(POLICY, 5, wait) == 5
        assert decide(POLICY, 5, wait, last_change=None, now=0.0) is None


def test_a_wait_below_the_band_shrinks_the_pool_and_an_idle_queue_goes_back_to_the_minimum():
    assert wanted_size(POLICY, 16, 0.25) == 4
    assert wanted_size(POLICY, 16, 0.49) == 8
    assert wanted_size(POLICY, 16, 0.0) == 1
    assert wanted_size(POLICY, 2, 0.4) == 1  # at least one thread fewer


def test_the_size_never_leaves_the_bounds():
    policy = ScalingPolicy(min_workers=3, max_workers=5, desired_wait=1.0, tolerance=0.2,
                           cooldown=0)
    assert wanted_size(policy, 5, 100.0) == 5
    assert wanted_size(policy, 3, 0.0) == 3
    assert decide(policy, 5, 100.0, last_change=None, now=0) is None  # already at the top
    assert decide(policy, 3, 0.0, last_change=None, now=0) is None
    assert wanted_size(policy, 9, 1.0) == 5  # a pool found outside the bounds comes back


def test_an_unknown_wait_changes_nothing():
    assert decide(POLICY, 4, None, last_change=None, now=100.0) is None


def test_at_most_one_change_per_cooldown_on_the_given_clock():
    assert decide(POLICY, 1, 40.0, last_change=None, now=100.0) == 16
    assert decide(POLICY, 16, 0.0, last_change=100.0, now=105.0) is None
    assert decide(POLICY, 16, 0.0, last_change=100.0, now=109.99) is None
    assert decide(POLICY, 16, 0.0, last_change=100.0, now=110.0) == 1


def test_the_tolerance_defaults_to_half_the_desired_wait():
    assert default_tolerance(2.0, None) == 1.0
    assert default_tolerance(2.0, 0.25) == 0.25


@pytest.mark.parametrize("kwargs", [
    {"min_workers": 0}, {"min_workers": 5, "max_workers": 4}, {"tolerance": 1.0},
    {"tolerance": -0.1}, {"cooldown": -1},
])
def test_a_policy_that_could_not_work_is_refused(kwargs):
    values = {"min_workers": 1, "max_workers": 4, "desired_wait": 1.0, "tolerance": 0.5,
              "cooldown": 1.0, **kwargs}
    with pytest.raises(ValueError):
        ScalingPolicy(**values)
