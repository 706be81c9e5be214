"""`runtasks --queue a --queue b[:weight]`: parsing, and which fetcher may read when."""

from __future__ import annotations

import argparse

import pytest

from django_taskrunner.management.commands.runtasks import queue_order, queue_spec
from django_taskrunner.worker.turns import QueueTurns


def test_queue_specs_parse_names_and_weights():
    assert queue_spec("emails") == ("emails", None)
    assert queue_spec("emails:3") == ("emails", 3)
    for bad in ("emails:0", "emails:x", "emails:", "emails:101", "em{ails", ":3"):
        with pytest.raises(argparse.ArgumentTypeError):
            queue_spec(bad)


def test_the_order_is_strict_without_weights_and_a_missing_weight_counts_one():
    assert queue_order([]) is None
    assert queue_order([("a", None)]) is None
    assert queue_order([("a", None), ("b", None), ("a", None)]) == (("a", 0), ("b", 0))
    assert queue_order([("a", 3), ("b", None)]) == (("a", 3), ("b", 1))


def test_strict_order_reads_a_later_queue_only_while_the_earlier_ones_are_idle():
    turns = QueueTurns((("a", 0), ("b", 0)))
    turns.register("a", "a")
    turns.register("b", "b")
    assert turns.may_read("a")
    assert not turns.may_read("b")  # a has not read yet
    turns.read("a", "a", found=False)
    assert turns.may_read("b")
    turns.read("a", "a", found=True)
    assert not turns.may_read("b")


def test_weights_give_each_queue_its_reads_per_round():
    turns = QueueTurns((("a", 2), ("b", 1)))
    turns.register("a", "a")
    turns.register("b", "b")
    reads = []
    for _ in range(9):
        queue = next(q for q in ("a", "b") if turns.may_read(q) and turns.credits[q] > 0) \
            if any(turns.credits[q] > 0 for q in ("a", "b")) else "a"
        assert turns.may_read(queue)
        turns.read(queue, queue, found=True)
        reads.append(queue)
    assert reads.count("a") == 6 and reads.count("b") == 3
    # a queue with nothing to read gives its turn away
    turns = QueueTurns((("a", 1), ("b", 1)))
    turns.register("a", "a")
    turns.register("b", "b")
    turns.read("b", "b", found=False)
    turns.read("a", "a", found=True)
    assert turns.may_read("a")
