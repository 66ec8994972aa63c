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
