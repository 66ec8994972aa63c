from django.template.loader import render_to_string

from tests.recovery.pages import text


def test_404_page_is_plain_words(client, make_user):
    client.force_login(make_user("coordinator"))
    response = client.get("/console/enquiries/NO-SUCH-REF/")
    assert response.status_code == 404
    assert b"Not found" in response.content
    assert b"Traceback" not in response.content


def test_500_page_renders_without_a_request_context():
    html = render_to_string("500.html")
    assert "Something went wrong on our side" in html


def test_admin_site_is_a_plain_403_for_a_signed_in_non_staff_person(client, make_user):
    client.force_login(make_user("coordinator"))
    response = client.get("/admin/")
    assert response.status_code == 403
    assert "not for your role" in text(response)
    assert 'name="password"' not in response.content.decode()


def test_favicon(client):
    response = client.get("/favicon.ico")
    assert response.status_code == 301
    assert response["Location"].endswith("/static/favicon.ico")
