"""Every outcome leaves through the acker: acks and requeues share one batch, and a
batch sent twice (a reply lost in an outage) neither doubles nor loses a retry."""

from __future__ import annotations

from django_taskrunner.store import get_store
from django_taskrunner.store.streams import Requeue


def read_all(broker, queue="default"):
    return broker.read(queue, "me", 100, None)


def test_one_settle_acks_some_entries_and_requeues_another(r):
    # Given three entries this consumer holds
    broker = get_store().streams
    broker.ensure_group("default")
    done, dropped, retried = (broker.add("default", body) for body in ("a", "b", "c"))
    assert [sid for sid, _ in read_all(broker)] == [done, dropped, retried]

    # When one batch acks two of them and requeues the third with a new body
    broker.settle("me", {"default": [done, dropped]}, [Requeue("default", retried, "c2")])

    # Then nothing is pending any more and only the retry is on the stream, as new
    assert broker.pending("default") == 0
    assert [body for _, body in read_all(broker)] == [b"c2"]


def test_a_batch_sent_again_neither_doubles_nor_loses_the_retry(r):
    # Given an entry to retry and an entry to ack, sent once already
    broker = get_store().streams
    broker.ensure_group("default")
    done, retried = broker.add("default", "a"), broker.add("default", "b")
    read_all(broker)
    batch = ({"default": [done]}, [Requeue("default", retried, "b2")])
    broker.settle("me", *batch)

    # When the same batch is sent again (its first reply was lost)
    broker.settle("me", *batch)

    # Then the retry is on the stream exactly once
    assert [body for _, body in read_all(broker)] == [b"b2"]
    assert broker.length("default") == 1


def test_a_requeue_of_an_entry_another_worker_took_over_moves_nothing(r):
    # Given an entry that another consumer claimed meanwhile
    broker = get_store().streams
    broker.ensure_group("default")
    stream_id = broker.add("default", "a")
    read_all(broker)
    r.xclaim(broker.stream("default"), broker.group, "other", 0, [stream_id])

    # When this worker's acker sends its retry
    broker.settle("me", {}, [Requeue("default", stream_id, "a2")])

    # Then the other worker still holds it and no second copy was added
    assert broker.length("default") == 1
    assert broker.pending_idle("default", 0, "-", 10)[0].consumer == "other"
