"""Staff users and logged-in clients for the admin tests."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import Permission, User
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
