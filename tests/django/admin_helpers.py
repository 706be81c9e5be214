"""Staff users and logged-in clients for the admin tests, and the admin's pages as the
admin site has them registered (so a test names a page by its model, never by the
module that holds it)."""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any

from django.contrib import admin
from django.contrib.auth.models import Permission, User
from django.db.models import Model
from django.test import Client


def make_user(username: str, *perms: str, staff: bool = True) -> User:
    """A user (staff unless told) with the app's permissions named by codename."""
    user = User.objects.create_user(username, password="pw", is_staff=staff)  # noqa: S106
    for codename in perms:
        user.user_permissions.add(Permission.objects.get(
            codename=codename, content_type__app_label="django_taskrunner"))
    return user


def logged_in(user: User, **client_options: Any) -> Client:
    """A test client logged in as `user` (`enforce_csrf_checks=True`, say)."""
    client = Client(**client_options)
    client.force_login(user)
    return client


def page_of(model: type[Model]) -> admin.ModelAdmin:
    """The admin page the site has registered for `model`."""
    return admin.site.get_model_admin(model)


def page_module(model: type[Model]) -> ModuleType:
    """The module holding the admin page of `model`, for the helpers that serve it only."""
    return sys.modules[type(page_of(model)).__module__]
