"""The log-in forms check a username's length before anything authenticates it: a very long
one was passed on to authenticate(), and django-axes' record of the failure (a 255-character
column) raised a DataError, a 500, on /accounts/login/ and on the admin's log-in page."""

import pytest
from axes.models import AccessAttempt
from django.test import Client


@pytest.mark.parametrize("url", ["/accounts/login/", "/admin/login/"])
def test_a_very_long_username_is_a_form_error_not_a_500(db, url):
    client = Client(raise_request_exception=False)
    response = client.post(url, {"username": "x" * 5000, "password": "whatever"})
    assert response.status_code == 200
    errors = response.context["form"].errors["username"]
    assert errors == ["A username has at most 150 characters."]
    assert AccessAttempt.objects.count() == 0  # nothing was authenticated


def test_a_wrong_password_is_still_counted(db, make_user):
    user = make_user("coordinator")
    response = Client().post(
        "/accounts/login/", {"username": user.username, "password": "not the password"}
    )
    assert response.status_code == 200
    assert AccessAttempt.objects.filter(username=user.username).count() == 1
