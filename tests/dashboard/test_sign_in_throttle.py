"""Sign-in is throttled per user name and per address, on the dashboard and the admin.

Thirty wrong passwords in 17 s were all let through. Now LOGIN_FAILURE_LIMIT (10)
failures lock the user name out, and separately the address, for LOGIN_LOCKOUT_S
(15 min): 429 and the locked-out page, even for the right password.
"""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from scheduler_app.security import client_ip

pytestmark = pytest.mark.django_db

PASSWORD = "pw-for-throttle-tests"
LIMIT = 10  # settings.AXES_FAILURE_LIMIT, from LOGIN_FAILURE_LIMIT's default


@pytest.fixture
def users() -> list:
    User = get_user_model()
    made = [User.objects.create_user(f"user{i}", password=PASSWORD) for i in range(3)]
    made.append(User.objects.create_user("ops", password=PASSWORD, is_staff=True,
                                         is_superuser=True))
    return made


def attempt(url: str, username: str, password: str, address: str = "10.0.0.1") -> int:
    response = Client(REMOTE_ADDR=address).post(
        url, {"username": username, "password": password})
    return response.status_code


def test_thirty_wrong_passwords_are_not_all_tried(settings, users):
    assert settings.AXES_FAILURE_LIMIT == LIMIT
    codes = [attempt("/login/", "user0", f"guess-{i}") for i in range(30)]
    assert codes[:LIMIT - 1] == [200] * (LIMIT - 1)  # the form again, with its error
    assert set(codes[LIMIT - 1:]) == {429}, codes  # then refused, the password unchecked
    # the right password too, now: the account is locked for a while
    assert attempt("/login/", "user0", PASSWORD) == 429
    locked = Client(REMOTE_ADDR="10.0.0.1").post("/login/", {"username": "user0",
                                                            "password": PASSWORD})
    assert b"Too many failed sign-ins" in locked.content


def test_a_user_name_is_locked_from_every_address(users):
    for i in range(LIMIT):
        attempt("/login/", "user1", "wrong", address=f"10.0.1.{i}")
    assert attempt("/login/", "user1", PASSWORD, address="10.0.9.9") == 429
    # another user is not affected
    assert attempt("/login/", "user2", PASSWORD, address="10.0.9.9") == 302


def test_an_address_is_locked_for_every_user_name(users):
    for i in range(LIMIT):
        attempt("/login/", f"nobody{i}", "wrong", address="10.0.2.2")
    assert attempt("/login/", "user2", PASSWORD, address="10.0.2.2") == 429
    assert attempt("/login/", "user2", PASSWORD, address="10.0.2.3") == 302


def test_the_admin_sign_in_is_throttled_too(users):
    codes = [attempt("/admin/login/", "ops", "wrong", address="10.0.3.3") for _ in range(LIMIT)]
    assert codes == [200] * (LIMIT - 1) + [429]  # the failure that reaches the limit locks
    assert attempt("/admin/login/", "ops", PASSWORD, address="10.0.3.4") == 429
    assert attempt("/login/", "ops", PASSWORD, address="10.0.3.4") == 429  # one count


def test_a_success_resets_the_count(users):
    for _ in range(LIMIT - 1):
        attempt("/login/", "user0", "wrong")
    assert attempt("/login/", "user0", PASSWORD) == 302
    for _ in range(LIMIT - 1):
        assert attempt("/login/", "user0", "wrong") == 200  # counted from zero again


def test_behind_a_proxy_the_address_is_the_one_the_proxy_appended(settings, rf):
    request = rf.get("/", REMOTE_ADDR="10.9.9.9", HTTP_X_FORWARDED_FOR="6.6.6.6, 1.2.3.4")
    assert client_ip(request) == "10.9.9.9"  # no proxy configured: the header is ignored
    settings.LOGIN_CLIENT_IP_HEADER = "X-Forwarded-For"
    assert client_ip(request) == "1.2.3.4"  # not the client's own "6.6.6.6"
