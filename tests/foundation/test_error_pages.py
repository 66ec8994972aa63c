from django.template.loader import render_to_string


def test_404_page_is_plain_words(client, make_user):
    client.force_login(make_user("coordinator"))
    response = client.get("/console/enquiries/NO-SUCH-REF/")
    assert response.status_code == 404
    assert b"Not found" in response.content
    assert b"Traceback" not in response.content


def test_500_page_renders_without_a_request_context():
    html = render_to_string("500.html")
    assert "Something went wrong on our side" in html
