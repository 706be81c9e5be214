"""What more than one admin page uses: how a page adds its own views (`page_path`), the
base of the pages that show Redis-held data, the NUL-free changelist of the
database-backed lists, SCAN paging, the names and decoding of task streams, and a wait
written for people (`age`).

A Redis page (delayed tasks, unique locks, limits, tasks, workflows, the queues
dashboard) has an unmanaged model and no rows: nothing can be added, changed or deleted
through Django's generic views. Its "view" permission opens the page; each action checks
a permission of its own. Pages go through `admin_site.admin_view`, which sends anyone
who is not active staff to the login page, and POSTs go through Django's CSRF check.

A changelist whose query string holds a NUL byte (`?q=%00`, a hand-edited address):
PostgreSQL text cannot hold NUL, so filtering or searching with one raises `DataError`,
a 500 (SQLite just finds nothing). The byte can match nothing anywhere, so it is dropped
before the changelist reads the query string.

Keys (locks, limits) are found with SCAN and a MATCH pattern, never KEYS, a bounded number
of calls per page. A page position is a SCAN cursor (with the node, on Redis Cluster)
plus how many matches of that cursor's batch earlier pages already showed, so "next
page" links carry the position and nothing is kept between requests. As with SCAN
itself, a key created or deleted while someone pages may be shown twice or not at all;
every key there the whole time is shown once.

No page answers 500 for what Redis holds or does: every view a page adds goes through
`redis_guarded`, which turns any Redis error (the server down, a key of the wrong type) into
the page's banner (`unavailable.html`), or a 503 with the error for the JSON a page polls.
"""

from __future__ import annotations

import functools
import logging
import re
from dataclasses import dataclass
from typing import Any

from django.contrib import admin
from django.http import HttpRequest, HttpResponse, JsonResponse, QueryDict
from django.template.response import TemplateResponse
from django.urls import URLPattern, path

from django_taskrunner.conf import QUEUE_NAME
from django_taskrunner.core import sharding
from django_taskrunner.core.message import TaskMessage
from django_taskrunner.exceptions import InvalidTaskPayload, RedisUnavailable, UnreadableData
from django_taskrunner.store import keys
from django_taskrunner.store.errors import REDIS_DOWN, REDIS_ERROR
from django_taskrunner.store.inspect import StreamBrowser
from django_taskrunner.store.locks import UniqueLocks

logger = logging.getLogger(__name__)

PAGE_SIZE = 100
SCAN_COUNT = 500  # keys Redis examines per SCAN call
MAX_SCAN_CALLS = 40  # per page: at most about 20,000 keys examined per page view
POSITION = re.compile(r"^(\d{1,4})\.(\d{1,20})\.(\d{1,6})$")


def age(seconds: float) -> str:
    """A wait for people: "12 s", "3 min 05 s", "2 h 04 min"."""
    whole = round(seconds)
    if whole < 120:
        return f"{whole} s"
    minutes, secs = divmod(whole, 60)
    if minutes < 120:
        return f"{minutes} min {secs:02d} s"
    return f"{minutes // 60} h {minutes % 60:02d} min"


def redis_trouble(exc: BaseException) -> str:
    """What a banner says of a Redis error: down, or an answer it could not use."""
    if isinstance(exc, (*REDIS_DOWN, RedisUnavailable)):
        return f"Redis cannot be reached: {exc}"
    if isinstance(exc, UnreadableData):
        return f"{exc}; the rest of Redis is untouched"
    return (f"Redis answered with an error: {exc} (a key of an unexpected type or content "
            f"is unreadable; the rest of Redis is untouched)")


def unavailable_page(model_admin: admin.ModelAdmin, request: HttpRequest, exc: BaseException,
                *, as_json: bool = False) -> HttpResponse:
    """The banner a page shows instead of its data when Redis fails it."""
    logger.warning("admin %s: %s", request.path, exc)
    if as_json:
        return JsonResponse({"error": redis_trouble(exc)}, status=503)
    opts = model_admin.opts
    context = {**model_admin.admin_site.each_context(request), "opts": opts,
               "title": getattr(model_admin, "title", "") or opts.verbose_name_plural,
               "has_view_permission": True, "trouble": redis_trouble(exc)}
    return TemplateResponse(request, f"admin/{opts.app_label}/unavailable.html", context)


def redis_guarded(model_admin: admin.ModelAdmin, view: Any, *, as_json: bool = False) -> Any:
    """`view`, with any Redis error answered by the page's banner instead of a 500."""
    @functools.wraps(view)
    def answer(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            response = view(request, *args, **kwargs)
            if isinstance(response, TemplateResponse):
                response.render()  # a template that reads Redis lazily fails here
            return response
        except (REDIS_ERROR, RedisUnavailable, UnreadableData) as exc:
            return unavailable_page(model_admin, request, exc, as_json=as_json)
    return answer


def page_path(model_admin: admin.ModelAdmin, route: str, view: Any, name: str) -> URLPattern:
    """One of a page's own views, as every page's `get_urls` adds it: behind the admin
    site's login and staff check, named `<app>_<model>_<name>` (as Django names its own),
    a Redis error answered with a banner (`redis_guarded`; "live" views are JSON)."""
    opts = model_admin.opts
    view = redis_guarded(model_admin, view, as_json=name == "live")
    return path(route, model_admin.admin_site.admin_view(view),
                name=f"{opts.app_label}_{opts.model_name}_{name}")


class RedisPageAdmin(admin.ModelAdmin):
    """No database table: a page (and its actions) built from Redis."""

    title = ""

    def get_urls(self) -> list[URLPattern]:
        """The page alone; pages with actions add theirs."""
        return [page_path(self, "", self.changelist_view, "changelist")]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.has_perm(f"{self.opts.app_label}.view_{self.opts.model_name}"))

    def url_name(self, view: str) -> str:
        """The reversible name of one of this page's views: "changelist", "action"..."""
        return f"{self.admin_site.name}:{self.opts.app_label}_{self.opts.model_name}_{view}"

    def render(self, request: HttpRequest, template: str, context: dict[str, Any]
               ) -> TemplateResponse:
        """`admin/django_taskrunner/<model>/<template>` with the admin's usual context."""
        context = {
            **self.admin_site.each_context(request), "opts": self.opts, "title": self.title,
            "has_view_permission": True, **context,
        }
        return TemplateResponse(
            request, f"admin/{self.opts.app_label}/{self.opts.model_name}/{template}", context)


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


@dataclass(frozen=True)
class Position:
    """Where a page starts: node index (Redis Cluster), SCAN cursor, matches to skip."""

    node: int = 0
    cursor: int = 0
    skip: int = 0

    def __str__(self) -> str:
        return f"{self.node}.{self.cursor}.{self.skip}"

    @classmethod
    def parse(cls, text: str | None) -> Position:
        """A position from a "next page" link; the first page for anything malformed."""
        match = POSITION.match(text or "")
        if match is None:
            return cls()
        return cls(*(int(group) for group in match.groups()))


def scan_keys_page(store: UniqueLocks, at: Position, match: str, size: int,
                   scan_count: int = SCAN_COUNT) -> tuple[list[str], Position | None, int]:
    """At most `size` key names matching `match` from `at` on, found with at most
    MAX_SCAN_CALLS SCANs of `scan_count` keys each over every node: (names, the next
    page's position or None, SCAN calls made)."""
    nodes = store.scan_nodes()
    node, cursor, skip = at.node, at.cursor, at.skip
    found: list[str] = []
    calls = 0
    while node < nodes:
        if calls >= MAX_SCAN_CALLS or len(found) >= size:
            return found, Position(node, cursor, 0), calls
        next_cursor, batch = store.scan_keys(node, cursor, match, scan_count)
        calls += 1
        batch = batch[skip:]
        room = size - len(found)
        if len(batch) > room:
            return found + batch[:room], Position(node, cursor, skip + room), calls
        found += batch
        cursor, skip = next_cursor, 0
        if cursor == 0:
            node += 1
    return found, None, calls


def stream_names(queues: list[str], browser: StreamBrowser | None = None) -> list[str]:
    """Every stream of these queues: a queue, or each shard of a split one; with a
    `browser`, also each priority level in use (docs/priorities.md)."""
    shards = sharding.all_shards(queues)
    return shards if browser is None else browser.streams(shards)


def valid_stream(name: str, queues: list[str]) -> bool:
    """`name` is a stream of one of `queues` (a crafted name never reaches Redis)."""
    queue = keys.queue_of(name)
    shard = keys.shard_of(name)
    return (bool(QUEUE_NAME.match(queue)) and queue in queues and shard in sharding.shards(queue)
            and (name == shard or name in keys.level_names(shard)))


def decode_body(body: bytes | None) -> TaskMessage | None:
    """The message in a body; None when it is missing or does not decode."""
    if body is None:
        return None
    try:
        return TaskMessage.from_json(body)
    except InvalidTaskPayload:
        return None
