"""Message ids: random UUID4s written as 32 hex digits."""

from __future__ import annotations

import uuid

from django_taskrunner.core.dispatch import new_message_id


def test_message_ids_are_random_uuid4_hex() -> None:
    ids = [new_message_id() for _ in range(2000)]
    assert len(set(ids)) == len(ids)
    for value in ids:
        parsed = uuid.UUID(value)
        assert parsed.hex == value and len(value) == 32
        assert parsed.version == 4
        assert parsed.variant == uuid.RFC_4122
