"""Message ids: random UUID4s written as 32 hex digits."""

from __future__ import annotations

import uuid

from django_taskrunner.core.dispatch import new_message_id, new_message_ids


def test_message_ids_are_random_uuid4_hex() -> None:
    ids = [new_message_id() for _ in range(2000)]
    assert len(set(ids)) == len(ids)
    for value in ids:
        parsed = uuid.UUID(value)
        assert parsed.hex == value and len(value) == 32
        assert parsed.version == 4
        assert parsed.variant == uuid.RFC_4122


def test_a_batch_of_ids_is_random_uuid4_hex_drawn_at_once() -> None:
    ids = new_message_ids(500) + new_message_ids(500)
    assert len(set(ids)) == 1000
    for value in ids:
        parsed = uuid.UUID(value)
        assert parsed.hex == value and (parsed.version, parsed.variant) == (4, uuid.RFC_4122)
    assert new_message_ids(0) == []
