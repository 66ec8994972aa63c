import pytest

from intake.models import Category
from tests.intake.factories import EnquiryFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(client, django_user_model):
    user = django_user_model.objects.create_superuser("root", "root@example.org", "pw")
    client.force_login(user)
    return client


def test_categories_are_configured_in_the_admin(admin_client):
    response = admin_client.post(
        "/admin/intake/category/add/",
        {"slug": "noise", "name": "Noise", "keywords": "noise\nloud music", "active": "on"},
    )
    assert response.status_code == 302
    category = Category.objects.get(slug="noise")
    assert category.keyword_list() == ["noise", "loud music"]
    listing = admin_client.get("/admin/intake/category/?active__exact=1")
    assert b"noise" in listing.content


def test_enquiries_are_read_only_in_the_admin(admin_client):
    enquiry = EnquiryFactory(state="ready_for_review")
    url = f"/admin/intake/enquiry/{enquiry.pk}/change/"
    page = admin_client.get(url)
    assert page.status_code == 200
    assert b'name="state"' not in page.content
    admin_client.post(url, {"state": "confirmed"})
    enquiry.refresh_from_db()
    assert enquiry.state == "ready_for_review"
    assert admin_client.get("/admin/intake/enquiry/add/").status_code == 403
    assert admin_client.post(f"/admin/intake/enquiry/{enquiry.pk}/delete/").status_code == 403


@pytest.mark.parametrize("model", ["intakeevent", "suggestion"])
def test_events_and_suggestions_cannot_be_added(admin_client, model):
    from django.apps import apps

    assert admin_client.get(f"/admin/intake/{model}/").status_code == 200
    assert admin_client.get(f"/admin/intake/{model}/add/").status_code == 403
    assert admin_client.post(f"/admin/intake/{model}/add/", {}).status_code == 403
    assert not apps.get_model("intake", model).objects.exists()


@pytest.mark.parametrize(
    "url",
    ["/admin/intake/enquiry/", "/admin/intake/category/", "/admin/intake/intakeevent/"],
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
