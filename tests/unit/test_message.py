"""The wire format: versioned JSON, tolerant of extra and missing optional fields."""

from __future__ import annotations

import json

import pytest

from django_taskrunner import InvalidTaskPayload, TaskMessage


def test_a_message_survives_a_round_trip():
    message = TaskMessage(id="abc", task_name="app.tasks.t", queue="q", payload={"a": [1, "x"]},
                          attempt=2, dispatched_at_ms=1_700_000_000_000, lock_key="k",
                          unique_mode="until_finished", expires_at_ms=1_700_000_100_000)
    decoded = TaskMessage.from_json(message.to_json(), stream_id="1-0")
    assert decoded == message
    assert decoded.stream_id == "1-0"
    assert decoded.dispatched_at.year == 2023


def test_unknown_fields_are_ignored_and_missing_optional_ones_defaulted():
    raw = json.dumps({"v": 1, "id": "x", "task": "t", "future_field": {"ok": True}})
    message = TaskMessage.from_json(raw)
    assert (message.payload, message.attempt, message.lock_key) == (None, 1, None)


@pytest.mark.parametrize("raw", [
    b"not json",
    b"\xff\xfe",
    b"[1,2]",
    b'"a string"',
    b'{"v": 3, "id": "x", "task": "t"}',
    b'{"id": "x", "task": "t"}',
    b'{"v": 1, "task": "t"}',
    b'{"v": 1, "id": "", "task": "t"}',
    b'{"v": 1, "id": "x", "task": 5}',
    b'{"v": 1, "id": "x", "task": "t", "attempt": "many"}',
    b'{"v": 1, "id": "x", "task": "t", "attempt": 0}',
])
def test_malformed_messages_raise_invalid_task_payload(raw):
    with pytest.raises(InvalidTaskPayload):
        TaskMessage.from_json(raw)


@pytest.mark.parametrize("payload", [object(), {1, 2}, float("nan"), {"when": b"bytes"}])
def test_a_payload_that_is_not_json_is_refused_naming_the_task(payload):
    message = TaskMessage(id="x", task_name="shop.tasks.send", queue="q", payload=payload)
    with pytest.raises(InvalidTaskPayload, match="shop.tasks.send"):
        message.to_json()


# -- anything a stream entry holds decodes or raises InvalidTaskPayload (issue 22, 8/9/13) --

def wire(**fields):
    """A well-formed wire message with `fields` replaced (a value of DROP removes one)."""
    data = {"v": 1, "id": "m1", "task": "app.tasks.t", "queue": "default",
            "payload": {"n": 1}, "attempt": 1, "ts": 1_700_000_000_000}
    data.update(fields)
    return json.dumps(data, allow_nan=True).encode()


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_a_well_formed_message_with_every_field_decodes():
    raw = wire(lock="taskrunner:{default}:unique:app.tasks.t:k", mode="until_executed",
               tid=True, exp=1_700_000_100_000, rt=4000)
    message = TaskMessage.from_json(raw)
    assert (message.lock_key, message.unique_mode, message.has_task_id) == (
        "taskrunner:{default}:unique:app.tasks.t:k", "until_executed", True)
    assert (message.expires_at_ms, message.reservation_timeout_ms) == (1_700_000_100_000, 4000)


@pytest.mark.parametrize("depth", [988, 995, 5000])
def test_a_message_nested_past_the_recursion_limit_is_invalid_not_a_recursion_error(depth):
    raw = b'{"v": 1, "id": "x", "task": "t", "payload": ' + nested(depth).encode() + b"}"
    with pytest.raises(InvalidTaskPayload, match="nested"):
        TaskMessage.from_json(raw)


def test_a_payload_nested_past_the_limit_is_invalid_and_one_at_the_limit_decodes():
    from django_taskrunner.core.message import PAYLOAD_MAX_DEPTH

    at_limit = b'{"v": 1, "id": "x", "task": "t", "payload": ' + nested(
        PAYLOAD_MAX_DEPTH).encode() + b"}"
    assert TaskMessage.from_json(at_limit).payload is not None
    over = b'{"v": 1, "id": "x", "task": "t", "payload": ' + nested(
        PAYLOAD_MAX_DEPTH + 1).encode() + b"}"
    with pytest.raises(InvalidTaskPayload, match=f"more than {PAYLOAD_MAX_DEPTH}"):
        TaskMessage.from_json(over)


@pytest.mark.parametrize("field", ["attempt", "ts", "exp", "rt"])
@pytest.mark.parametrize("number", ["1e400", "-1e400", "NaN", "Infinity", "1" + "0" * 5000])
def test_an_overflowing_number_in_any_field_is_invalid_not_an_overflow_error(field, number):
    raw = b'{"v": 1, "id": "x", "task": "t", "%s": %s}' % (field.encode(), number.encode())
    with pytest.raises(InvalidTaskPayload):
        TaskMessage.from_json(raw)


@pytest.mark.parametrize("number", ["1e400", "NaN", "-Infinity"])
def test_a_payload_number_json_cannot_encode_again_is_invalid(number):
    # the worker would fail to re-encode it for a retry, and the entry would stay pending
    raw = b'{"v": 1, "id": "x", "task": "t", "payload": {"n": %s}}' % number.encode()
    with pytest.raises(InvalidTaskPayload):
        TaskMessage.from_json(raw)


@pytest.mark.parametrize("fields", [
    {"v": True}, {"v": 1.5}, {"v": "1"},
    {"id": ["x"]}, {"id": "x" * 256},
    {"queue": 5}, {"queue": ["default"]},
    {"attempt": True}, {"attempt": 1.5}, {"attempt": -3}, {"attempt": 10**12},
    {"ts": "now"}, {"ts": -1}, {"ts": 10**20}, {"ts": [1]},
    {"lock": 5}, {"lock": True}, {"lock": ["k"]}, {"lock": {"k": 1}}, {"lock": ""},
    {"lock": "k", "mode": "forever"}, {"lock": "k", "mode": 3},
    {"tid": 1}, {"tid": "yes"}, {"tid": None},
    {"exp": "soon"}, {"exp": -5}, {"exp": 10**20}, {"exp": 1.5},
])
def test_a_field_of_the_wrong_type_or_range_is_invalid(fields):
    with pytest.raises(InvalidTaskPayload) as caught:
        TaskMessage.from_json(wire(**fields))
    assert caught.value.task_name in (None, "app.tasks.t")


@pytest.mark.parametrize("rt", [0, -100, "long", False, 10**20, [1]])
def test_a_reservation_timeout_that_cannot_be_used_is_ignored_not_fatal(rt):
    # rt is advisory (tests/unit/test_reliability_settings.py): the default applies
    assert TaskMessage.from_json(wire(rt=rt)).reservation_timeout_ms is None


@pytest.mark.parametrize("raw", [
    b'{"v": 1, "id": "x", "task": "t", "payload": "\\udcff"}',  # an escaped lone surrogate
    b'{"v": 1, "id": "x", "task": "t", "payload": "\xed\xb3\xbf"}',  # its UTF-8-like bytes
    b'{"v": 1, "id": "x", "task": "t", "payload": {"\\ud800": 1}}',  # in a key
])
def test_a_lone_surrogate_in_a_message_is_invalid(raw):
    with pytest.raises(InvalidTaskPayload):
        TaskMessage.from_json(raw)


def test_an_escaped_surrogate_pair_is_a_character_and_decodes():
    raw = b'{"v": 1, "id": "x", "task": "t", "payload": "\\ud83d\\ude00 \\\\udcff"}'
    assert TaskMessage.from_json(raw).payload == "\U0001f600 \\udcff"


def test_a_body_over_the_size_limit_is_invalid_before_it_is_parsed():
    from django_taskrunner.core.message import MESSAGE_MAX_BYTES

    raw = wire(payload="x" * MESSAGE_MAX_BYTES)
    with pytest.raises(InvalidTaskPayload, match="bytes"):
        TaskMessage.from_json(raw)
    with pytest.raises(InvalidTaskPayload, match="bytes"):
        TaskMessage.from_json(b"{" * (MESSAGE_MAX_BYTES + 1))


def test_random_damage_to_a_message_only_ever_raises_invalid_task_payload():
    # Deterministic: a fixed seed; every single-byte change, cut and splice of a message
    # with every optional field either decodes or raises InvalidTaskPayload.
    import random

    rng = random.Random(22)  # noqa: S311 - a fixed seed, not a secret
    good = wire(lock="taskrunner:{default}:unique:t", mode="until_finished", tid=True,
                exp=1_700_000_100_000, rt=4000, payload={"a": [1, 2.5, "é", None, True]})
    specials = [b"1e400", b"[[[[", b"\\udcff", b"\xed\xa0\x80", b"NaN", b"-0", b'""', b"\x00",
                b"true", b"9" * 30, b"{}", b"null"]
    for _ in range(3000):
        raw = bytearray(good)
        at = rng.randrange(len(raw))
        choice = rng.random()
        if choice < 0.4:
            raw[at] = rng.randrange(256)
        elif choice < 0.7:
            raw[at:at + rng.randrange(1, 8)] = rng.choice(specials)
        else:
            raw = raw[:at]
        try:
            TaskMessage.from_json(bytes(raw))
        except InvalidTaskPayload:
            pass


def test_the_lock_must_name_a_unique_lock_of_the_queue_it_was_read_from():
    def message(lock):
        return TaskMessage.from_json(wire(lock=lock, mode="until_finished"))

    message("tr:{default}:unique:app.tasks.t:k").check_lock_key("tr", "default")
    message("tr:{default}:unique:app.tasks.t").check_lock_key("tr", "default")
    TaskMessage.from_json(wire()).check_lock_key("tr", "default")  # no lock: nothing to check
    for lock in ["tr:{default}:stream", "tr:{other}:unique:app.tasks.t", "k",
                 "tr:{default}:unique-mode:app.tasks.t", "tr:{default}:unique:",
                 "other:{default}:unique:app.tasks.t"]:
        with pytest.raises(InvalidTaskPayload, match="lock"):
            message(lock).check_lock_key("tr", "default")


# -- what dispatch sends: limits checked when the message is encoded -----------------------

def test_a_lone_surrogate_in_a_payload_is_refused_naming_the_task():
    message = TaskMessage(id="x", task_name="shop.tasks.send", queue="q", payload="\udcff")
    with pytest.raises(InvalidTaskPayload, match="shop.tasks.send.*surrogate"):
        message.to_json()


@pytest.mark.parametrize("depth", [101, 995, 3000])
def test_a_payload_nested_too_deep_is_refused_naming_the_task(depth):
    payload: list = []
    for _ in range(depth - 1):
        payload = [payload]
    message = TaskMessage(id="x", task_name="shop.tasks.send", queue="q", payload=payload)
    with pytest.raises(InvalidTaskPayload, match="shop.tasks.send.*nested"):
        message.to_json()


def test_a_payload_at_the_depth_limit_is_sent_and_reads_back():
    from django_taskrunner.core.message import PAYLOAD_MAX_DEPTH

    payload: dict = {}
    for _ in range(PAYLOAD_MAX_DEPTH - 1):
        payload = {"a": payload}
    message = TaskMessage(id="x", task_name="t", queue="q", payload=payload)
    assert TaskMessage.from_json(message.to_json()).payload == payload


def test_a_payload_that_refers_to_itself_is_refused():
    payload: list = []
    payload.append(payload)
    with pytest.raises(InvalidTaskPayload):
        TaskMessage(id="x", task_name="t", queue="q", payload=payload).to_json()


def test_a_message_over_the_size_limit_is_refused_naming_the_task():
    from django_taskrunner.core.message import MESSAGE_MAX_BYTES

    fits = TaskMessage(id="x", task_name="t", queue="q", payload="é" * (MESSAGE_MAX_BYTES // 4))
    assert TaskMessage.from_json(fits.to_json()).payload == fits.payload
    # the limit counts UTF-8 bytes, not characters
    big = TaskMessage(id="x", task_name="shop.tasks.send", queue="q",
                      payload="é" * (MESSAGE_MAX_BYTES // 2))
    with pytest.raises(InvalidTaskPayload, match="shop.tasks.send.*bytes"):
        big.to_json()


@pytest.mark.parametrize(("fields", "expected"), [
    ({"attempt": None, "ts": None}, {"attempt": 1, "dispatched_at_ms": 0}),
    ({"attempt": 3.0, "ts": 1700000000000.0}, {"attempt": 3, "dispatched_at_ms": 1700000000000}),
    ({"queue": None}, {"queue": ""}),
    ({"queue": ""}, {"queue": ""}),
    ({"exp": None, "lock": None, "mode": None, "tok": None, "tc": None, "rt": None},
     {"expires_at_ms": None, "lock_key": None, "unique_mode": None, "dispatch_token": None,
      "trace_context": None, "reservation_timeout_ms": None}),
    ({"id": "x" * 255}, {"id": "x" * 255}),
])
def test_null_and_integral_values_of_optional_fields_decode_to_their_defaults(fields, expected):
    message = TaskMessage.from_json(wire(**fields))
    assert {name: getattr(message, name) for name in expected} == expected


# -- a dispatch_many batch encodes its shared envelope once (core/message.py batch_bodies) --

def batch(payloads, **shared):
    from django_taskrunner.core.dispatch import new_message_ids

    name = shared.pop("task_name", "shop.tasks.send")
    return [TaskMessage(id=message_id, task_name=name, queue="q", payload=payload,
                        dispatched_at_ms=1_700_000_000_000, **shared)
            for message_id, payload in zip(new_message_ids(len(payloads)), payloads,
                                           strict=True)]


@pytest.mark.parametrize("shared", [
    {}, {"expires_at_ms": 1_700_000_100_000, "reservation_timeout_ms": 4000, "priority": 7,
         "trace_context": "00-" + "a" * 32 + "-" + "b" * 16 + "-01"},
    {"task_name": 'shop.tasks.\x01id\x01"'},  # a name holding a stand-in: the long way
])
def test_the_bodies_of_a_batch_are_exactly_what_each_message_encodes_alone(shared):
    from django_taskrunner.core.message import batch_bodies

    messages = batch([None, 1, "é ☃", {"n": [1, {"k": "\x01payload\x01"}]}, [[[]]]], **shared)
    assert batch_bodies(messages) == [message.to_json() for message in messages]


@pytest.mark.parametrize("bad, match", [
    ({"when": b"bytes"}, "not JSON-serialisable"),
    (json.loads("[" * 150 + "]" * 150), "nested more than"),
    ("\udcff", "lone surrogate"),
    ("x" * (4 * 1024 * 1024), "over the limit"),
])
def test_a_bad_payload_in_a_batch_raises_what_it_raises_alone(bad, match):
    from django_taskrunner.core.message import batch_bodies

    with pytest.raises(InvalidTaskPayload, match=match):
        batch_bodies(batch([{"n": 1}, bad]))


def test_a_payload_that_contains_itself_is_refused_in_a_batch_and_alone():
    from django_taskrunner.core.message import batch_bodies

    cycle: list = []
    cycle.append(cycle)
    with pytest.raises(InvalidTaskPayload, match="contains itself"):
        batch_bodies(batch([cycle]))
    with pytest.raises(InvalidTaskPayload, match="contains itself"):
        batch([cycle])[0].to_json()


PLAIN_CASES = [
    ("0123456789abcdef0123456789abcdef", "app.tasks.send", "default", {}),
    ("an id with spaces", "app.tasks.send", "emails", {"to": "a@example.com", "n": [1, 2.5]}),
    ('quote " and \\ backslash', "app.tâches.envoyer", "files d'attente", ["é", None, True]),
    ("ünïcode-ïd", "t", "q", "text with \n newline and \u2028 separator"),
    ("12345", "t", "q", None),
    ("x", "t", "q", 10**30),
]


@pytest.mark.parametrize(("message_id", "task_name", "queue", "payload"), PLAIN_CASES)
def test_a_plain_message_encodes_exactly_as_its_wire_fields_do(
    message_id, task_name, queue, payload,
):
    # A message with none of the optional fields is put together around its payload:
    # it must be the very text json.dumps gives for its wire fields, in their order.
    message = TaskMessage(id=message_id, task_name=task_name, queue=queue, payload=payload,
                          attempt=3, dispatched_at_ms=1_733_000_000_123)
    expected = {"v": 1, "id": message_id, "task": task_name, "queue": queue,
                "payload": payload, "attempt": 3, "ts": 1_733_000_000_123}

    text = message.to_json()

    assert text == json.dumps(expected, separators=(",", ":"), ensure_ascii=False)
    assert TaskMessage.from_json(text) == message


def test_an_optional_field_gives_the_same_text_as_the_plain_form_plus_that_field():
    plain = TaskMessage(id="abc", task_name="t", queue="q", payload={"a": 1})
    with_priority = TaskMessage(id="abc", task_name="t", queue="q", payload={"a": 1},
                                priority=7)

    assert with_priority.to_json() == plain.to_json()[:-1] + ',"pr":7}'
