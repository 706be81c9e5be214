"""The base of the admin pages that show Redis-held data through an unmanaged model
(delayed tasks, unique locks, the queues dashboard).

Such a model has no rows: nothing can be added, changed or deleted through Django's
generic views. Its "view" permission opens the page; each action checks a permission of
its own. Pages go through `admin_site.admin_view`, which sends anyone who is not active
staff to the login page, and POSTs go through Django's CSRF check.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.template.response import TemplateResponse


class RedisPageAdmin(admin.ModelAdmin):
    """No database table: a page (and its actions) built from Redis."""

    title = ""

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
