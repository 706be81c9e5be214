"""A changelist whose query string holds a NUL byte (`?q=%00`, a hand-edited address).

PostgreSQL text cannot hold NUL: filtering or searching with one raises `DataError`, a
500 (SQLite just finds nothing). The byte can match nothing anywhere, so it is dropped
before the changelist reads the query string.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, QueryDict


def without_nul(query: QueryDict) -> QueryDict:
    """`query` with every NUL byte removed from its names and values."""
    cleaned = QueryDict(mutable=True)
    for key, values in query.lists():
        cleaned.setlist(key.replace("\x00", ""), [value.replace("\x00", "") for value in values])
    cleaned._mutable = False
    return cleaned


class NulFreeChangeListMixin:
    """For a ModelAdmin of a table: its changelist never sends a NUL to the database."""

    def get_changelist_instance(self, request: HttpRequest) -> Any:
        if any("\x00" in key or any("\x00" in value for value in values)
               for key, values in request.GET.lists()):
            request.GET = without_nul(request.GET)
        return super().get_changelist_instance(request)  # type: ignore[misc]
