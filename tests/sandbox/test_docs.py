"""The fake document store: versions, content types, access revocation."""

import pytest

pytestmark = pytest.mark.slow  # every test starts a real sandbox process


def test_each_put_stores_a_new_version(api, sandbox):
    first = api.put("/docs/case-1", data="first draft", headers={"Content-Type": "text/plain"})
    second = api.put("/docs/case-1", json={"summary": "second", "pages": 2})
    assert first.status_code == second.status_code == 201
    assert first.json() == {"id": "case-1", "version": 1}
    assert second.json() == {"id": "case-1", "version": 2}

    latest = api.get("/docs/case-1").json()
    assert latest["version"] == 2
    assert latest["content_type"] == "application/json"
    assert latest["content"] == {"summary": "second", "pages": 2}

    older = api.get("/docs/case-1", params={"version": 1}).json()
    assert older["version"] == 1
    assert older["content_type"] == "text/plain"
    assert older["content"] == "first draft"
    assert sandbox.stats()["docs"] == {"total": 1, "versions": 2}


def test_missing_document_or_version_is_404(api):
    assert api.get("/docs/nothing").status_code == 404
    api.put("/docs/case-2", data="text")
    missing_version = api.get("/docs/case-2", params={"version": 7})
    assert missing_version.status_code == 404
    assert missing_version.json()["error"] == "not_found"
    assert api.get("/docs/case-2", params={"version": "latest"}).status_code == 400


def test_revoked_access_is_403_until_restored(api, sandbox):
    api.put("/docs/case-3", data="secret")
    revoked = api.post("/_sandbox/docs/case-3/access", json={"allowed": False})
    assert revoked.json() == {"id": "case-3", "allowed": False}
    denied = api.get("/docs/case-3")
    assert denied.status_code == 403
    assert denied.json()["error"] == "access_denied"

    sandbox.set_doc_access("case-3", True)
    assert api.get("/docs/case-3").json()["content"] == "secret"
    assert api.post("/_sandbox/docs/case-3/access", json={"allowed": "no"}).status_code == 400


def test_put_rejects_bad_bodies(api, sandbox):
    bad_json = api.put("/docs/case-4", data="{oops", headers={"Content-Type": "application/json"})
    assert bad_json.status_code == 400
    assert bad_json.json()["error"] == "malformed_json"
    assert api.put("/docs/case-4", data=b"").status_code == 400
    assert api.put("/docs/case-4", data=b"\xff\xfe").status_code == 400
    assert sandbox.stats()["docs"]["total"] == 0
