"""The Tasks page's list across every queue, its opening list: the queued or running
tasks of all streams together, oldest first, a page at a time.

A page reads at most one page plus one entry from each stream (queued: one XRANGE from
the stream's delivery floor or its cursor; running: one XPENDING from its cursor), merges
them by stream id (the time each entry was added) and shows the first `PER_PAGE`. The
"next page" cursor holds each stream's own position, the last id of it shown
(`stream~id,...`), so no stream is read from its start again, and no row is lost or shown
twice when two streams hold the same id. At most `ALL_STREAMS` streams are read; the page
says when there are more (each stays reachable from its own list).
"""

from __future__ import annotations

from typing import Any

from django_taskrunner.store.browse import STREAM_ID, stream_id_key

ALL_STREAMS = 50  # streams one page of the list across all queues reads, at most
ALL = "all"  # the "queue" of that list in the page's address


def parse_positions(text: str, streams: list[str]) -> dict[str, str]:
    """Each stream's position from a cursor ("stream~id,..."); a malformed part, or one
    naming a stream not in `streams`, is dropped (that stream starts at its start)."""
    positions: dict[str, str] = {}
    known = set(streams)
    for part in text[:20_000].split(",")[:ALL_STREAMS]:
        stream, _sep, stream_id = part.rpartition("~")
        if stream in known and STREAM_ID.match(stream_id):
            positions[stream] = stream_id
    return positions


def positions_text(positions: dict[str, str]) -> str:
    """The cursor of `positions`: "stream~id,..."."""
    return ",".join(f"{stream}~{stream_id}" for stream, stream_id in sorted(positions.items()))


def merged_page(browser: Any, streams: list[str], floors: list[str], status: str,
                after: str, size: int, row_of: Any) -> tuple[list[Any], str]:
    """One page of every stream's queued (or running) rows, merged oldest first, and the
    cursor of the next page ("" at the end). `floors`: each stream's last delivered id
    (its group state, which the page reads anyway); `row_of(stream, item)` builds a row."""
    positions = parse_positions(after, streams)
    candidates: list[tuple[tuple[int, int], str, Any]] = []
    for stream, floor in zip(streams[:ALL_STREAMS], floors, strict=False):
        for item in _read(browser, stream, floor, status, positions.get(stream, ""),
                          size + 1):
            candidates.append((stream_id_key(item.stream_id), stream, item))
    candidates.sort(key=lambda found: (found[0], found[1]))
    shown = candidates[:size]
    for _key, stream, item in shown:
        positions[stream] = item.stream_id
    rows = [row_of(stream, item) for _key, stream, item in shown]
    return rows, positions_text(positions) if len(candidates) > size else ""


def _read(browser: Any, stream: str, floor: str, status: str, after: str, count: int
          ) -> list[Any]:
    """Up to `count` entries of `stream` past `after` ("" from the start): waiting ones
    (past the group's delivery floor `floor` too) or pending ones."""
    if status == "running":
        return browser.held(stream, after or "-", count)
    start = after if after and stream_id_key(after) > stream_id_key(floor) else floor
    return browser.waiting_after(stream, start, count)
