"""Admin for `FailedTask`: read-only rows, a detail page with the payload and traceback,
and retry actions that ask for confirmation (selected rows, one row, or every row
matching the current filter). A retry dispatches the rows' tasks again in bounded
chunks and deletes the rows it dispatched.

"Edit and retry" (`<pk>/edit/`) shows the row's payload in a JSON editor; on POST (CSRF,
the `change_failedtask` and `delete_failedtask` permissions: it changes what runs and
deletes the row) the payload is checked as `dispatch()` checks it, by dispatching: bad
JSON, or a payload the task refuses, shows the error on the form and dispatches nothing.
A dispatched edit deletes the row and writes the old and new payload to the admin's
history (`LogEntry`)."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.views.main import PAGE_VAR, ChangeList
from django.core.exceptions import PermissionDenied
from django.core.paginator import InvalidPage, Page, Paginator
from django.db import OperationalError, connections, router, transaction
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.defaultfilters import pluralize
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.functional import cached_property
from django.utils.html import escape, format_html
from django.utils.safestring import mark_safe

from django_taskrunner.admin.shared import NulFreeChangeListMixin, page_path
from django_taskrunner.admin.timeline import moment
from django_taskrunner.core.context import with_kept_steps
from django_taskrunner.core.dispatch import dispatch, dispatch_again, dispatch_many
from django_taskrunner.core.message import nested_too_deep
from django_taskrunner.core.records import PENDING_TTL_S
from django_taskrunner.core.registry import registry
from django_taskrunner.exceptions import TaskRunnerError
from django_taskrunner.models import FailedTask
from django_taskrunner.shim import SHIM_TASK

CHUNK = 500


def pretty_json(text: str) -> str:
    """Indented JSON, or the text unchanged when it is not JSON or nested too deep.

    How deep `json.loads` can go depends on the Python version (3.11 raises RecursionError
    near 1,000 levels, 3.13 parses far deeper), and indenting thousands of levels would
    make a page of megabytes: past the payload limit the raw text is shown.
    """
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):  # the raw body of an undecodable message
        return text
    if nested_too_deep(value):
        return text
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


# The distinct values of one indexed column, one index seek each (a "loose index scan"):
# SELECT DISTINCT reads every row, 3 s at a million rows on PostgreSQL. Runs on
# PostgreSQL and SQLite (recursive CTEs); the order is the column's, as ORDER BY's.
DISTINCT_SQL = """
WITH RECURSIVE seen(value) AS (
    SELECT MIN({column}) FROM {table}
    UNION ALL
    SELECT (SELECT MIN({column}) FROM {table} WHERE {column} > seen.value)
    FROM seen WHERE seen.value IS NOT NULL
)
SELECT value FROM seen WHERE value IS NOT NULL
"""


def distinct_values(column: str) -> list[str]:
    """Every value of an indexed, non-null column of FailedTask, in order."""
    connection = connections[router.db_for_read(FailedTask)]
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(DISTINCT_SQL.format(column=quote(column),
                                           table=quote(FailedTask._meta.db_table)))
        return [row[0] for row in cursor.fetchall()]


class IndexedValuesFilter(admin.AllValuesFieldListFilter):
    """The admin's list of every value of a column, found through its index.

    Only for FailedTaskAdmin, whose queryset is every row (the values Django would list).
    """

    def __init__(self, field: Any, request: HttpRequest, params: Any, model: Any,
                 model_admin: Any, field_path: str) -> None:
        super().__init__(field, request, params, model, model_admin, field_path)
        self.lookup_choices = distinct_values(field.column)


# How many rows past the start of the page shown the list counts, at most.
COUNT_CAP = 10_000
# How long that count may take on PostgreSQL: a filter or search whose matches are rare
# but not rare enough for an index can read the whole table to find 10,000 of them.
COUNT_TIMEOUT_MS = 100
QUERY_CANCELED = "57014"  # PostgreSQL's SQLSTATE for a statement_timeout


def bounded_count(queryset: QuerySet[Any], timeout_ms: int) -> int | None:
    """`queryset.count()`, or None when PostgreSQL gives up on it after `timeout_ms`.

    The timeout is set for this statement only: in a transaction (or savepoint) rolled
    back afterwards, so it never outlasts the count, inside an outer atomic block too.
    Other databases (SQLite) count without a limit of time.
    """
    connection = connections[queryset.db]
    if connection.vendor != "postgresql" or timeout_ms <= 0:
        return queryset.count()
    try:
        with transaction.atomic(using=queryset.db):
            with connection.cursor() as cursor:
                cursor.execute("SELECT set_config('statement_timeout', %s, true)",
                               [f"{int(timeout_ms)}ms"])
            counted = queryset.count()
            transaction.set_rollback(True, using=queryset.db)
            return counted
    except OperationalError as exc:
        cause = exc.__cause__
        if (getattr(cause, "sqlstate", None) or getattr(cause, "pgcode", None)) != QUERY_CANCELED:
            raise
        return None


class AtLeast(int):
    """A lower bound of a row count (a count that stopped at its cap, or was cancelled):
    the int Django pages with, shown as "10,000+" (more than 10,000).

    Django's admin templates print the count (`{{ cl.result_count }}`, "Select all N",
    "N results"); this keeps them as they are, on every Django version.
    """

    def __str__(self) -> str:
        return f"{int(self) - 1:,}+"

    __repr__ = __str__


class CappedPaginator(Paginator):
    """Django's paginator without the exact COUNT(*) of every matching row.

    An exact count reads every row that matches: 1 to 4 s at a million rows on
    PostgreSQL, on every page. This one first reads the page asked for (one row more):
    when that is the last page, the count is exact and costs no second query. Otherwise it
    counts at most `cap` rows past the page's start, through a LIMITed subquery, and a
    count that reaches the limit is an `AtLeast`, shown as "10,000+": the page links
    reach that far, and each page further on counts from where it starts, so every page
    stays reachable. A count PostgreSQL cannot finish in `timeout_ms` says only that a
    next page exists ("100+" on the first page).
    """

    def __init__(self, object_list: Any, per_page: int, *, page_number: int = 1,
                 cap: int = COUNT_CAP, timeout_ms: int = COUNT_TIMEOUT_MS,
                 **kwargs: Any) -> None:
        super().__init__(object_list, per_page, **kwargs)
        self.page_number, self.cap, self.timeout_ms = page_number, cap, timeout_ms
        self.page_rows: list[Any] | None = None

    @cached_property
    def count(self) -> int:
        """The exact count, or an `AtLeast` once `cap` rows past the page's start exist."""
        start = (self.page_number - 1) * self.per_page
        rows = list(self.object_list[start:start + self.per_page + 1])
        if rows:
            self.page_rows = rows[:self.per_page]
        if len(rows) <= self.per_page and (rows or start == 0):
            return start + len(rows)
        limit = start + self.cap + 1
        counted = bounded_count(self.object_list.order_by().values("pk")[:limit],
                                self.timeout_ms)
        if counted is None:  # more than this page, how many more is not known
            return AtLeast(start + len(rows)) if rows else start
        return AtLeast(counted) if counted >= limit else counted

    def page(self, number: Any) -> Page:
        """The page; the one `count` read already is not read again."""
        number = self.validate_number(number)
        if self.page_rows is not None and number == self.page_number:
            return self._get_page(self.page_rows, number, self)
        return super().page(number)


class FailedTaskChangeList(ChangeList):
    """Shows a list of one page (at most `list_per_page` rows) from the rows the
    paginator read to count it, rather than reading them again; never offers "Show all"
    for a count that is only a lower bound (a cancelled count says "100+"), which would
    read every row."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        if isinstance(self.result_count, AtLeast) and self.can_show_all:
            self.can_show_all = False
            if self.show_all:
                try:
                    self.result_list = self.paginator.page(self.page_num).object_list
                except InvalidPage as exc:
                    raise IncorrectLookupParameters from exc
        rows = getattr(self.paginator, "page_rows", None)
        if not self.multi_page and rows is not None:
            self.result_list = rows


def page_number(request: HttpRequest) -> int:
    """The page the changelist shows, read as Django's ChangeList reads it."""
    try:
        return max(1, int(request.GET.get(PAGE_VAR, 1)))
    except ValueError:
        return 1


@dataclass
class RetryReport:
    """How a retry went: rows dispatched again (and deleted), and rows kept, with why."""

    retried: int = 0
    problems: list[str] = field(default_factory=list)
    kept: int = 0

    def keep(self, row: FailedTask, why: object) -> None:
        self.kept += 1
        if len(self.problems) < 20:
            self.problems.append(f"{row.task_name} ({row.message_id}): {why}")


def retry_rows(rows: Iterable[FailedTask], report: RetryReport) -> None:
    """Dispatch each row's task again with its payload (fresh attempts, a new id; the
    same id for a task that kept durable steps, so they hold); delete the rows that were
    dispatched. Rows that cannot be dispatched are kept."""
    batches: dict[tuple[str, str], list[tuple[FailedTask, object]]] = defaultdict(list)
    rows = list(rows)
    stepped = with_kept_steps([row.message_id for row in rows], PENDING_TTL_S)  # same id
    for row in rows:
        try:
            payload = json.loads(row.payload)
        except (ValueError, RecursionError):
            report.keep(row, "the payload is not JSON (the message could not be decoded)")
            continue
        task_name = dispatched_name(row.task_name, payload)
        if registry.find(task_name) is None:
            report.keep(row, "no task of that name is registered")
            continue
        batches[(task_name, row.queue)].append((row, payload))
    done: list[int] = []
    for (task_name, queue), entries in batches.items():
        task = registry.get(task_name)
        if task.options.unique or any(row.message_id in stepped for row, _p in entries):
            done += _one_by_one(task_name, queue, entries, report, stepped)
            continue
        try:
            dispatch_many(task, [payload for _row, payload in entries], queue=queue)
        except TaskRunnerError as exc:
            for row, _payload in entries:
                report.keep(row, exc)
            continue
        done += [row.pk for row, _payload in entries]
    FailedTask.objects.filter(pk__in=done).delete()
    report.retried += len(done)


def dispatched_name(shown: str, payload: object) -> str:
    """The task to dispatch for a row named `shown`: a Django Tasks framework task's row
    shows the framework function (`tasks.shown_name`) and runs through the shim."""
    if (registry.find(shown) is None and isinstance(payload, dict)
            and payload.get("func") == shown):
        return SHIM_TASK
    return shown


def _one_by_one(task_name: str, queue: str, entries: list[tuple[FailedTask, object]],
                report: RetryReport, stepped: AbstractSet[str] = frozenset()) -> list[int]:
    done = []
    for row, payload in entries:
        try:
            if row.message_id in stepped:  # under its id: its kept steps hold
                dispatch_again(registry.get(task_name), payload, queue=queue,
                               task_id=row.message_id)
            else:
                dispatch(task_name, payload, queue=queue)
        except TaskRunnerError as exc:
            report.keep(row, exc)
            continue
        done.append(row.pk)
    return done


MAX_EDIT = 1_000_000  # characters of an edited payload


def edit_and_retry(row: FailedTask, text: str) -> tuple[str | None, str]:
    """Dispatch the row's task with the payload `text` (JSON): (the new task id, "") or
    (None, why not). `dispatch()` checks the payload before sending anything."""
    if len(text) > MAX_EDIT:
        return None, f"The payload is longer than {MAX_EDIT:,} characters."
    try:
        payload = json.loads(text)
    except (ValueError, RecursionError) as exc:
        return None, f"This is not JSON: {exc}"
    task_name = dispatched_name(row.task_name, payload)
    if registry.find(task_name) is None:
        return None, f"No task named {row.task_name!r} is registered: nothing to dispatch."
    try:
        return dispatch(task_name, payload, queue=row.queue).id, ""
    except TaskRunnerError as exc:
        return None, f"Not dispatched: {exc}"


def edit_message(row: FailedTask, text: str, task_id: str) -> str:
    """The history entry of an edit-and-retry: what ran before and what runs now."""
    def short(value: str) -> str:
        return value if len(value) <= 2000 else value[:2000] + "…"
    return (f"Edited the payload and retried as task {task_id}. "
            f"Before: {short(row.payload)} After: {short(json.dumps(json.loads(text)))}")


def retry_queryset(queryset: QuerySet[FailedTask]) -> RetryReport:
    """Retry every row of `queryset`, CHUNK rows at a time, by ascending primary key, so
    100,000 rows never sit in memory at once and deleting them does not disturb the walk."""
    report = RetryReport()
    last_pk = 0
    while True:
        chunk = list(queryset.filter(pk__gt=last_pk).order_by("pk")[:CHUNK])
        if not chunk:
            return report
        last_pk = chunk[-1].pk
        retry_rows(chunk, report)


class FailedTaskAdmin(NulFreeChangeListMixin, admin.ModelAdmin):
    list_display = ("task", "queue", "error_class", "short_error", "attempts", "failed_when")
    list_filter = (("task_name", IndexedValuesFilter), ("queue", IndexedValuesFilter),
                   ("error_class", IndexedValuesFilter), "failed_at")
    # Django's search: `icontains` on each field, OR-ed, for each word. On PostgreSQL the
    # trigram indexes of migration 0010 serve it (words of 3 characters or more).
    search_fields = ("payload", "error", "task_name", "message_id")
    # No date_hierarchy: its SELECT DISTINCT over a date function reads every row (1.3 s
    # at 100,000 rows on SQLite); the failed_at filter (today, past 7 days...) costs nothing.
    actions = ["retry_selected", "delete_selected"]
    fields = ("task_name", "queue", "message_id", "dispatch_token", "attempts", "worker",
              "failed_when",
              "error_class", "error", "payload_pretty", "traceback_pre")
    readonly_fields = fields
    change_list_template = "admin/django_taskrunner/failedtask/change_list.html"
    change_form_template = "admin/django_taskrunner/failedtask/change_form.html"
    show_full_result_count = False  # no COUNT(*) over 100,000 rows on every page
    count_cap = COUNT_CAP  # the list counts at most this many rows past its page's start
    count_timeout_ms = COUNT_TIMEOUT_MS  # ...and for at most this long on PostgreSQL

    def get_paginator(self, request: HttpRequest, queryset: QuerySet[FailedTask],
                      per_page: int, orphans: int = 0,
                      allow_empty_first_page: bool = True) -> CappedPaginator:
        """A paginator that counts at most COUNT_CAP rows past the page shown."""
        return CappedPaginator(queryset, per_page, orphans=orphans,
                               allow_empty_first_page=allow_empty_first_page,
                               page_number=page_number(request), cap=self.count_cap,
                               timeout_ms=self.count_timeout_ms)

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return FailedTaskChangeList

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_retry_permission(self, request: HttpRequest) -> bool:
        """Retrying deletes the row, so it takes the delete permission."""
        return self.has_delete_permission(request)

    @admin.display(description="task name", ordering="task_name")
    def task(self, obj: FailedTask) -> str:
        """The dotted name, breakable after each dot only (never mid-word)."""
        return mark_safe(escape(obj.task_name).replace(".", ".<wbr>"))  # noqa: S308 - escaped

    @admin.display(description="failed at", ordering="failed_at")
    def failed_when(self, obj: FailedTask) -> str:
        """The console's one time format, with seconds (Django's default has none)."""
        return moment(obj.failed_at)

    @admin.display(description="error message")
    def short_error(self, obj: FailedTask) -> str:
        """The message without the class name the error column already shows."""
        text = obj.error
        class_name = obj.error_class.rpartition(".")[2]
        if class_name and text.startswith(f"{class_name}: "):
            text = text[len(class_name) + 2:]
        return text if len(text) <= 120 else text[:117] + "..."

    @admin.display(description="payload")
    def payload_pretty(self, obj: FailedTask) -> str:
        return format_html("<pre>{}</pre>", pretty_json(obj.payload))

    @admin.display(description="traceback")
    def traceback_pre(self, obj: FailedTask) -> str:
        return format_html("<pre>{}</pre>", obj.traceback)

    def get_urls(self) -> list[Any]:
        return [
            page_path(self, "retry-matching/", self.retry_matching_view, "retry_matching"),
            page_path(self, "<int:pk>/retry/", self.retry_one_view, "retry_one"),
            page_path(self, "<int:pk>/edit/", self.edit_retry_view, "edit_retry"),
            *super().get_urls(),
        ]

    @admin.action(description="Retry selected failed tasks", permissions=["retry"])
    def retry_selected(self, request: HttpRequest, queryset: QuerySet[FailedTask]) -> Any:
        """Ask first; on the confirming POST dispatch each task again and delete its row."""
        if request.POST.get("confirm") == "yes":
            self._report(request, retry_queryset(queryset))
            return None
        across = request.POST.get("select_across") == "1"
        selected = [] if across else [str(pk) for pk in queryset.values_list("pk", flat=True)]
        return self._confirm(request, count=queryset.count(), action="retry_selected",
                             selected=selected, select_across=across)

    def retry_one_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        row = get_object_or_404(FailedTask, pk=pk)
        if not self.has_retry_permission(request):
            raise PermissionDenied
        if request.method == "POST" and request.POST.get("confirm") == "yes":
            self._report(request, retry_queryset(FailedTask.objects.filter(pk=row.pk)))
            return HttpResponseRedirect(reverse("admin:django_taskrunner_failedtask_changelist"))
        return self._confirm(request, count=1, rows=[row])

    def has_edit_retry_permission(self, request: HttpRequest) -> bool:
        """Editing changes what runs (change) and retrying deletes the row (delete)."""
        return bool(request.user.has_perm("django_taskrunner.change_failedtask")
                    and self.has_delete_permission(request))

    def edit_retry_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        """GET: the payload in an editor; POST: dispatch with the edited payload."""
        row = get_object_or_404(FailedTask, pk=pk)
        if not self.has_edit_retry_permission(request):
            raise PermissionDenied
        text = pretty_json(row.payload)
        error = ""
        if request.method == "POST":
            text = request.POST.get("payload", "")
            dispatched, error = edit_and_retry(row, text)
            if dispatched is not None:
                self.log_change(request, row, edit_message(row, text, dispatched))
                row.delete()
                self.message_user(request, f"Dispatched {row.task_name} again with the "
                                  f"edited payload as task {dispatched}; the failed-task "
                                  f"row was deleted.", messages.SUCCESS)
                return HttpResponseRedirect(
                    reverse("admin:django_taskrunner_failedtask_changelist"))
        return TemplateResponse(request, "admin/django_taskrunner/failedtask/edit_retry.html", {
            **self.admin_site.each_context(request), "opts": self.model._meta,
            "title": f"Edit and retry {row.task_name}", "row": row, "payload": text,
            "error": error, "original": row,
        })

    def retry_matching_view(self, request: HttpRequest) -> HttpResponse:
        """Retry every row the changelist shows with the filters and search in the URL."""
        if not self.has_retry_permission(request):
            raise PermissionDenied
        back = reverse("admin:django_taskrunner_failedtask_changelist")
        try:
            queryset = self.get_changelist_instance(request).get_queryset(request)
        except IncorrectLookupParameters as exc:
            # An unknown parameter or a bad filter value: retrying with it ignored could
            # retry far more rows than the operator chose, so retry nothing.
            self.message_user(request, f"Nothing was retried: the address has a parameter "
                              f"that is not a filter of this list, or a bad filter value "
                              f"({exc}). Choose the rows with the list's filters.",
                              messages.ERROR)
            return HttpResponseRedirect(back)
        if request.method == "POST" and request.POST.get("confirm") == "yes":
            self._report(request, retry_queryset(queryset))
            return HttpResponseRedirect(f"{back}?{request.GET.urlencode()}")
        return self._confirm(request, count=queryset.count(), matching=True,
                             query=request.GET.urlencode())

    def _confirm(self, request: HttpRequest, **context: Any) -> TemplateResponse:
        return TemplateResponse(request, "admin/django_taskrunner/failedtask/retry_confirm.html", {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": f"Retry {context['count']} failed task{pluralize(context['count'])}?",
            "action_checkbox_name": ACTION_CHECKBOX_NAME,
            **context,
        })

    def _report(self, request: HttpRequest, report: RetryReport) -> None:
        if report.retried:
            self.message_user(request, f"Dispatched {report.retried} task(s) again; their "
                              f"failed-task rows were deleted.", messages.SUCCESS)
        if report.kept:
            self.message_user(request, f"{report.kept} row(s) were not retried and are kept.",
                              messages.WARNING)
        for problem in report.problems:
            self.message_user(request, f"Not retried: {problem}", messages.ERROR)
