"""The task page shows the task's record (status, result or error, progress, attempts,
times), and offers Cancel: POST with CSRF, the `cancel_task` permission, a confirmation
first; a crafted id or queue answers 404."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client

from django_taskrunner import dispatch, lookup
from tests.django.admin_helpers import logged_in, make_user
from tests.testapp import tasks
from tests.worker_helpers import app_now_ms

pytestmark = pytest.mark.django_db(transaction=True)

DETAIL = "/admin/django_taskrunner/task/detail/"
CANCEL = "/admin/django_taskrunner/task/cancel/"


@pytest.fixture
def root() -> Client:
    return logged_in(User.objects.create_superuser("root", password="pw"))  # noqa: S106


def page_facts(client: Client, message_id: str):  # type: ignore[no-untyped-def]
    """What the task page of `message_id` in "default" shows (its `gather()` facts)."""
    response = client.get(DETAIL, {"queue": "default", "id": message_id})
    assert response.status_code == 200
    return response.context["facts"]


def test_a_finished_task_page_shows_its_record_and_result(root):
    message = tasks.returns_double.dispatch({"n": 4})
    call_command("runtasks", "--burst")

    html = root.get(DETAIL, {"queue": "default", "id": message.id}).content.decode()

    assert 'tr-record-status tr-status-succeeded">succeeded' in html
    assert '&quot;double&quot;: 8' in html
    assert "Cancel this task" not in html  # finished: nothing to cancel


def test_a_failed_task_page_shows_the_error_and_traceback(root):
    message = tasks.always_fails.dispatch({"n": 1})
    call_command("runtasks", "--burst")

    html = root.get(DETAIL, {"queue": "default", "id": message.id}).content.decode()

    assert "tr-status-failed" in html
    assert "ValueError: boom" in html
    assert "tr-traceback" in html and "Traceback (most recent call last)" in html


def test_cancel_asks_first_then_cancels_and_frees_the_lock(root, r):
    message = tasks.unique_records.dispatch({"n": 1})
    page = root.get(DETAIL, {"queue": "default", "id": message.id}).content.decode()
    assert "Cancel this task" in page and "tr-status-queued" in page

    confirm = root.post(CANCEL, {"queue": "default", "id": message.id})
    assert confirm.status_code == 200
    assert "are you sure?" in confirm.content.decode()
    assert lookup(message.id).status == "queued"

    done = root.post(CANCEL, {"queue": "default", "id": message.id, "confirm": "yes"},
                     follow=True)
    assert f"Cancelled task {message.id}" in done.content.decode()
    assert lookup(message.id).status == "cancelled"
    assert not r.exists(message.lock_key)

    again = root.post(CANCEL, {"queue": "default", "id": message.id, "confirm": "yes"},
                      follow=True)
    assert "nothing was cancelled" in again.content.decode()


def test_cancel_needs_post_csrf_and_the_permission():
    message = dispatch(tasks.noop, {"n": 1})
    viewer = logged_in(make_user("viewer", "view_task"))
    canceller = logged_in(make_user("canceller", "view_task", "cancel_task"),
                          enforce_csrf_checks=True)

    assert "Cancel this task" not in viewer.get(
        DETAIL, {"queue": "default", "id": message.id}).content.decode()
    assert viewer.get(CANCEL, {"queue": "default", "id": message.id}).status_code == 405
    assert viewer.post(CANCEL, {"queue": "default", "id": message.id,
                                "confirm": "yes"}).status_code == 403
    assert canceller.post(CANCEL, {"queue": "default", "id": message.id,
                                   "confirm": "yes"}).status_code == 403  # no CSRF token
    assert lookup(message.id).status == "queued"


def test_an_unknown_id_or_another_queues_task_answers_404(root):
    other = dispatch(tasks.noop, {"n": 1}, queue="other")
    assert root.post(CANCEL, {"queue": "default", "id": "no-such"}).status_code == 404
    # a task of queue "other" cannot be cancelled through a crafted queue=default
    assert root.post(CANCEL, {"queue": "default", "id": other.id,
                              "confirm": "yes"}).status_code == 404
    assert root.post(CANCEL, {"queue": "no{such}", "id": other.id}).status_code == 404
    assert lookup(other.id).status == "queued"


def test_a_task_page_by_id_reads_the_entry_its_record_names_without_searching(root):
    from django_taskrunner import dispatch_many

    # On a cluster too: there the record, in another slot, follows the XADD with its id.
    plain = dispatch(tasks.noop, {"n": 1})
    unique = tasks.unique_records.dispatch({"n": 3})
    many = dispatch_many(tasks.noop, [{"n": i} for i in range(3)])
    for message in (plain, unique, *many):
        record = lookup(message.id)
        assert record.shard == "default"
        assert record.stream_id == message.stream_id
        facts = page_facts(root, message.id)
        assert (facts.status, facts.stream_id) == ("queued", message.stream_id)
        assert facts.searched == 0

    html = root.get(DETAIL, {"queue": "default", "id": many[-1].id}).content.decode()
    assert many[-1].stream_id in html

    call_command("runtasks", "--burst")
    facts = page_facts(root, plain.id)
    assert facts.record.status == "succeeded" and facts.searched == 0


def test_a_record_without_its_stream_id_is_found_by_a_search_from_its_dispatch_time(root):
    from django_taskrunner.store import get_store, keys

    message = dispatch(tasks.noop, {"n": 1}, task_id="older-record")  # a record at dispatch
    broker = get_store().streams
    broker.client.hdel(keys.record_key(broker.prefix, message.id), "sid")  # an older record

    facts = page_facts(root, message.id)
    assert (facts.status, facts.stream_id) == ("queued", message.stream_id)
    assert facts.searched > 0


def _last_entry(stream: str) -> str:
    from django_taskrunner.store import get_store

    ((stream_id, _),) = get_store().client.xrevrange(stream, count=1)
    return stream_id.decode()


def test_a_promoted_delayed_tasks_page_reads_its_new_entry_without_searching(root):
    from django_taskrunner import dispatch_delayed
    from django_taskrunner.store import get_store

    broker = get_store().streams
    message = dispatch_delayed(tasks.noop, {"n": 1}, delay=3600)
    assert lookup(message.id).stream_id is None
    moved, _ = broker.promote_due("default", app_now_ms() + 3_601_000, 100)
    assert moved == 1

    record = lookup(message.id)
    assert record.status == "queued"
    assert record.stream_id == _last_entry(broker.stream("default"))
    facts = page_facts(root, message.id)
    assert (facts.status, facts.stream_id, facts.searched) == ("queued", record.stream_id, 0)
    assert record.stream_id in root.get(DETAIL, {"queue": "default", "id": message.id}
                                        ).content.decode()


def test_a_retried_tasks_page_reads_its_new_entry_without_searching(root):
    from django_taskrunner.store import get_store

    broker = get_store().streams
    message = tasks.fails_then_retries_later.dispatch({"n": 1})
    call_command("runtasks", "--burst")  # the first attempt fails: retried in 60 s
    assert lookup(message.id).status == "retrying"
    broker.promote_due("default", app_now_ms() + 61_000, 100)

    record = lookup(message.id)
    assert (record.status, record.attempt) == ("retrying", 2)
    assert record.stream_id == _last_entry(broker.stream("default"))
    facts = page_facts(root, message.id)
    assert (facts.status, facts.stream_id, facts.searched) == ("queued", record.stream_id, 0)
    assert facts.message.attempt == 2


def test_a_message_requeued_onto_its_stream_gives_its_record_the_new_entry(root):
    from django_taskrunner.store import get_store
    from django_taskrunner.store.streams import Requeue
    from django_taskrunner.worker.acker import Acker, Batch
    from django_taskrunner.worker.outage import RedisStatus

    broker = get_store().streams
    message = dispatch(tasks.noop, {"n": 1}, task_id="requeued")  # a record at dispatch
    broker.ensure_group("default")
    ((stream_id, body),) = broker.read("default", "someone", 1, None)
    acker = Acker(broker, "someone", RedisStatus())  # as a retry without backoff is sent
    assert acker.flush(Batch(requeues=[Requeue("default", stream_id, body)], size=1))

    new_id = _last_entry(broker.stream("default"))
    assert new_id != message.stream_id
    assert lookup(message.id).stream_id == new_id
    facts = page_facts(root, message.id)
    assert (facts.status, facts.stream_id, facts.searched) == ("queued", new_id, 0)


def test_a_delayed_entry_run_now_gives_its_record_the_new_entry():
    from django_taskrunner import dispatch_delayed
    from django_taskrunner.store import get_store

    broker = get_store().streams
    message = dispatch_delayed(tasks.noop, {"n": 1}, delay=3600)
    due_ms = int(lookup(message.id).due_at.timestamp() * 1000)
    store = broker.store.schedule
    assert store.take_delayed("default", due_ms, message.id, run=True) is not None
    record = lookup(message.id)
    assert (record.status, record.stream_id) == ("queued", _last_entry(broker.stream("default")))


def test_a_finished_task_page_shows_the_payload_it_ran_with_from_its_record(root):
    message = tasks.returns_double.dispatch({"n": 4, "note": "<b>kept</b>"})
    call_command("runtasks", "--burst")

    facts = page_facts(root, message.id)
    html = root.get(DETAIL, {"queue": "default", "id": message.id}).content.decode()

    assert lookup(message.id).payload == {"n": 4, "note": "<b>kept</b>"}
    assert facts.message is None and not facts.failed_rows  # its message left Redis
    shown = html.split('class="tr-pre tr-payload">')[1].split("</pre>")[0]
    assert "&quot;note&quot;: &quot;&lt;b&gt;kept&lt;/b&gt;&quot;" in shown  # escaped
