import pytest

from recovery.models import Queue


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
    from recovery.models import QueueVisit
    from tests.security.conftest import snapshot

    client.force_login(demo["admin"])
    before, visits = snapshot(), QueueVisit.objects.count()
    response = client.get(url)
    assert response.status_code == 200, response.content[:2000]
    assert snapshot() == before  # a page read changes no state, journal or queued task
    # Only the queue pages and an item's own pages record who looked at which queue (TEST-001:
    # its one write in a queue, shown to an admin who may act on it).
    recorded = {
        "/console/": len(Queue) - 1,
        "/console/review/": 1,
        "/console/enquiries/TEST-001/": 1,
        "/console/review/TEST-001/": 1,
    }.get(url, 0)
    assert QueueVisit.objects.count() - visits == recorded
