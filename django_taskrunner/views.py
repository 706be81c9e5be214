"""Dispatching from a view: JSON 202 with the task id, 409 on a duplicate, 400 on bad input."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_POST

from django_taskrunner.core.dispatch import dispatch
from django_taskrunner.core.message import PAYLOAD_MAX_DEPTH
from django_taskrunner.core.task import Task
from django_taskrunner.exceptions import (
    InvalidTaskOptions,
    InvalidTaskPayload,
    TaskAlreadyDispatched,
    TaskIdConflict,
)


def dispatch_response(
    name_or_task: str | Task, payload: Any = None, **options: Any
) -> JsonResponse:
    """Dispatch and answer: 202 `{"id": ...}`; 409 `{"holder_id": ...}` when a unique
    lock or task id is taken; 400 `{"error": ...}` when the payload or options are bad.
    """
    try:
        message = dispatch(name_or_task, payload, **options)
    except (TaskAlreadyDispatched, TaskIdConflict) as exc:
        return JsonResponse({"error": str(exc), "holder_id": exc.holder_id}, status=409)
    except (InvalidTaskPayload, InvalidTaskOptions) as exc:
        return JsonResponse({"error": str(exc)}, status=400)
    return JsonResponse({"id": message.id, "task": message.task_name, "queue": message.queue},
                        status=202)


def dispatch_view(
    name_or_task: str | Task, *, payload: Callable[[HttpRequest], Any] | None = None,
    **options: Any,
) -> Callable[[HttpRequest], JsonResponse]:
    """A POST-only view that dispatches the task.

    The payload is `payload(request)` when given, else the request's JSON body. A body
    that is not JSON, or that `dispatch()` refuses (too deep, too large, a lone
    surrogate), answers 400. Protect the view as you would any other (login, CSRF).
    """

    @require_POST
    def view(request: HttpRequest) -> JsonResponse:
        if payload is not None:
            try:
                value = payload(request)
            except (ValueError, KeyError, RecursionError) as exc:
                return JsonResponse({"error": f"bad request: {exc}"}, status=400)
        else:
            try:
                value = json.loads(request.body or b"null")
            except ValueError as exc:
                return JsonResponse({"error": f"body is not JSON: {exc}"}, status=400)
            except RecursionError:
                return JsonResponse({"error": f"body is nested more than {PAYLOAD_MAX_DEPTH} "
                                              f"levels deep"}, status=400)
        return dispatch_response(name_or_task, value, **options)

    return view
