import pytest


@pytest.mark.parametrize(
    "url",
    [
        "/console/",
        "/console/review/",
        "/console/enquiries/",
        "/console/enquiries/TEST-001/",
        "/console/review/TEST-001/",
        "/console/integrations/",
        "/console/integrations/documents/backlog/",
        "/console/dashboard/",
        "/console/drill/",
        "/console/runbooks/",
        "/metrics",
    ],
)
def test_demo_pages_render_for_admin(demo, client, url):
    client.force_login(demo["admin"])
    response = client.get(url)
    assert response.status_code == 200, response.content[:2000]
