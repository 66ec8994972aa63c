"""config.admin bounds every admin list's search before PostgreSQL sees it (a 5,000-word
search held a web thread for 16 s, then answered 503), and says so on the page."""

import pytest

from tests.intake.factories import EnquiryFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(client, django_user_model):
    user = django_user_model.objects.create_superuser("root", "root@example.org", "pw")
    client.force_login(user)
    return client


@pytest.mark.parametrize(
    "url",
    [
        "/admin/intake/enquiry/",
        "/admin/intake/category/",
        "/admin/intake/intakeevent/",
        "/admin/auth/user/",  # a library's admin: the bound is the site's, not ours alone
    ],
)
@pytest.mark.parametrize("term", [" ".join(f"w{i}" for i in range(5000)), "x" * 5000])
def test_a_huge_admin_search_is_refused_before_postgresql(admin_client, url, term):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    EnquiryFactory(email="w1@example.org")
    with CaptureQueriesContext(connection) as queries:
        response = admin_client.get(url, {"q": term})
    assert response.status_code == 200
    assert "too long to run" in response.content.decode()
    assert queries.captured_queries  # the page itself was read
    assert not any(term[:50] in q["sql"] for q in queries.captured_queries)


def test_a_short_admin_search_still_finds(admin_client):
    enquiry = EnquiryFactory(email="findme@example.org")
    response = admin_client.get("/admin/intake/enquiry/", {"q": "findme example"})
    assert enquiry.reference in response.content.decode()
    assert "too long to run" not in response.content.decode()
