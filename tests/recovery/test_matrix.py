"""Every console URL x method x role -> the status it must answer.

A meta-test walks the URL resolver: a console URL missing from MATRIX fails the suite, so a new
page or action cannot ship without saying who may reach it.
"""

import pytest
from django.urls import URLPattern, URLResolver, get_resolver

ROLES = (None, "coordinator", "reviewer", "admin")  # None: anonymous
LOGIN = 302  # anonymous people are sent to the login page
ALL = {None: LOGIN, "coordinator": 200, "reviewer": 200, "admin": 200}
REVIEWERS = {None: LOGIN, "coordinator": 403, "reviewer": 200, "admin": 200}
GET_ONLY = {None: LOGIN, "coordinator": 405, "reviewer": 405, "admin": 405}
# An operator action POSTed with no reason: the page again with the form open and the field
# named (422) when the role may act, 403 when it may not.
TRIAGE = {None: LOGIN, "coordinator": 422, "reviewer": 403, "admin": 422}
RECOVER = {None: LOGIN, "coordinator": 403, "reviewer": 403, "admin": 422}
APPROVE = {None: LOGIN, "coordinator": 403, "reviewer": 422, "admin": 422}
REVIEW = {None: LOGIN, "coordinator": 403, "reviewer": 422, "admin": 422}
ASSIGN = {None: LOGIN, "coordinator": 422, "reviewer": 422, "admin": 422}
# Integration actions still answer a refusal with a message and a redirect (302).
ADMIN_ONLY = {None: LOGIN, "coordinator": 403, "reviewer": 403, "admin": 302}
POST_ONLY = GET_ONLY
NOT_FOUND_FOR_REVIEWERS = {None: LOGIN, "coordinator": 403, "reviewer": 404, "admin": 404}
SETUP_PAGE = {None: LOGIN, "coordinator": 403, "reviewer": 403, "admin": 200}
SETUP_FORM = {None: LOGIN, "coordinator": 403, "reviewer": 403, "admin": 400}

MATRIX = {
    "queue": {"GET": ALL, "POST": GET_ONLY},
    # What changed owner since an open queue page was loaded (the page polls it).
    "queue-moved": {"GET": ALL, "POST": GET_ONLY},
    "review": {"GET": REVIEWERS, "POST": GET_ONLY},
    "review-item": {"GET": REVIEWERS, "POST": GET_ONLY},
    # Attach a new enquiry as a reply to the open one it quotes: no reason, the review page
    # again (422), nothing changed.
    "review-attach-as-reply": {"GET": POST_ONLY, "POST": REVIEW},
    "enquiries": {"GET": ALL, "POST": GET_ONLY},
    "enquiry": {"GET": ALL, "POST": GET_ONLY},
    "operation": {
        "GET": {None: LOGIN, "coordinator": 302, "reviewer": 302, "admin": 302},
        "POST": GET_ONLY,
    },
    # One operation's card alone (htmx polls it while a reconcile is in flight).
    "op-card": {"GET": ALL, "POST": GET_ONLY},
    "integrations": {"GET": ALL, "POST": GET_ONLY},
    # An admin's empty POST is a form shown again with its errors (400), nothing saved.
    "integration-settings": {
        "GET": {None: LOGIN, "coordinator": 403, "reviewer": 403, "admin": 200},
        "POST": {None: LOGIN, "coordinator": 403, "reviewer": 403, "admin": 400},
    },
    "backlog": {"GET": ALL, "POST": GET_ONLY},
    "dashboard": {"GET": ALL, "POST": GET_ONLY},
    # POST records a conclusion on a drill run (recovery.review_drillrun); an empty POST names
    # no run: refused as such (400), nothing recorded.
    "drill": {"GET": ALL, "POST": {None: LOGIN, "coordinator": 403, "reviewer": 403, "admin": 400}},
    "runbooks": {"GET": ALL, "POST": GET_ONLY},
    "runbook": {"GET": ALL, "POST": GET_ONLY},
    # Prometheus: no login page for a scraper; 401 without the token.
    "metrics": {
        "GET": {None: 401, "coordinator": 200, "reviewer": 200, "admin": 200},
        "POST": {None: 405, "coordinator": 405, "reviewer": 405, "admin": 405},
    },
    "op-reconcile": {"GET": POST_ONLY, "POST": TRIAGE},
    "op-retry": {"GET": POST_ONLY, "POST": RECOVER},
    "op-complete": {"GET": POST_ONLY, "POST": TRIAGE},
    # Its enquiry waits on this write (submission unknown): cancelling it would end the
    # enquiry, a reviewer's decision (ledger.models.cancel_permission).
    "op-cancel": {"GET": POST_ONLY, "POST": REVIEW},
    "op-compensate": {"GET": POST_ONLY, "POST": RECOVER},
    # The permission of the policy's approve (intake.approve_revision for a CRM write, which is
    # then refused as a state: a revision's write is approved only with the revision).
    "op-approve": {"GET": POST_ONLY, "POST": APPROVE},
    "op-reassign": {"GET": POST_ONLY, "POST": TRIAGE},
    "enquiry-approve": {"GET": POST_ONLY, "POST": APPROVE},
    "enquiry-edit": {"GET": POST_ONLY, "POST": REVIEW},
    "enquiry-request-information": {"GET": POST_ONLY, "POST": REVIEW},
    "enquiry-information-received": {"GET": POST_ONLY, "POST": REVIEW},
    "enquiry-reject": {"GET": POST_ONLY, "POST": REVIEW},
    "enquiry-assign": {"GET": POST_ONLY, "POST": ASSIGN},
    "pause": {"GET": POST_ONLY, "POST": ADMIN_ONLY},
    "resume": {"GET": POST_ONLY, "POST": ADMIN_ONLY},
    "release": {"GET": POST_ONLY, "POST": ADMIN_ONLY},
    # Calls the destination (read-only) and says what it found on the integrations page.
    "check_integration": {"GET": POST_ONLY, "POST": ADMIN_ONLY},
    # Issue 19. Assign to me: one click, then back where the person acted (302); a role that
    # may not reassign operations is refused (403).
    "op-take": {
        "GET": POST_ONLY,
        "POST": {None: LOGIN, "coordinator": 302, "reviewer": 403, "admin": 302},
    },
    "enquiry-take": {
        "GET": POST_ONLY,
        "POST": {None: LOGIN, "coordinator": 302, "reviewer": 302, "admin": 302},
    },
    # A bulk action with nothing chosen and no reason: refused as a whole (422), nothing done;
    # each item is checked against the person's permission when there are items.
    "bulk": {"GET": POST_ONLY, "POST": {None: LOGIN, **dict.fromkeys(ROLES[1:], 422)}},
    # Setting up (issue 25): admins only; an empty POST is the form again with its errors (400).
    "setup": {"GET": SETUP_PAGE, "POST": GET_ONLY},
    "setup-queue": {"GET": SETUP_PAGE, "POST": SETUP_FORM},
    "setup-category": {"GET": SETUP_PAGE, "POST": SETUP_FORM},
    "setup-category-new": {"GET": SETUP_PAGE, "POST": SETUP_FORM},
    "people": {"GET": SETUP_PAGE, "POST": GET_ONLY},
    "person": {"GET": SETUP_PAGE, "POST": SETUP_FORM},
    # Documents on the review page (issue 28): a reviewer's correction or new read of a document
    # this enquiry does not have: not found.
    "document-correct": {"GET": POST_ONLY, "POST": NOT_FOUND_FOR_REVIEWERS},
    "document-reprocess": {"GET": POST_ONLY, "POST": NOT_FOUND_FOR_REVIEWERS},
    # Appointment slots (issue 28): ask for a read (POST; this enquiry's category needs no visit:
    # said, and back to its page), or the card alone (htmx polls it).
    "enquiry-slots": {
        "GET": POST_ONLY,
        "POST": {None: LOGIN, "coordinator": 403, "reviewer": 302, "admin": 302},
    },
    "enquiry-slots-card": {"GET": REVIEWERS, "POST": GET_ONLY},
    # The messages Handover sends, and a person's own e-mail settings (issue 25): an empty POST
    # is "no e-mail", saved, back to the page.
    "notices": {"GET": ALL, "POST": GET_ONLY},
    # The words residents receive: an admin's page; an empty form is refused (422).
    "message-template": {
        "GET": SETUP_PAGE,
        "POST": {None: LOGIN, "coordinator": 403, "reviewer": 403, "admin": 422},
    },
    # The e-mail an action would send, previewed on its form: whoever may take the action.
    "enquiry-preview": {"GET": POST_ONLY, "POST": REVIEWERS},
    "me": {"GET": ALL, "POST": {None: LOGIN, **dict.fromkeys(ROLES[1:], 302)}},
    # A resident's reply waiting for a person: read by every role, attached or set aside by a
    # reviewer (no reason: the page again, 422, nothing changed); its documents downloaded.
    "answer": {"GET": ALL, "POST": GET_ONLY},
    "answer-attach": {"GET": POST_ONLY, "POST": REVIEW},
    "answer-set-aside": {"GET": POST_ONLY, "POST": REVIEW},
    "answer-file": {"GET": ALL, "POST": GET_ONLY},
    # A summary this session does not hold (any more): gone.
    "bulk-results": {
        "GET": {None: LOGIN, **dict.fromkeys(ROLES[1:], 410)},
        "POST": GET_ONLY,
    },
}


def console_routes():
    """(url name, view module) for every URL pattern whose view lives in recovery."""
    found = []

    def walk(patterns, namespace=""):
        for entry in patterns:
            if isinstance(entry, URLResolver):
                walk(entry.url_patterns, entry.namespace or namespace)
            elif isinstance(entry, URLPattern):
                view = getattr(entry.callback, "view_class", entry.callback)
                if view.__module__.startswith("recovery."):
                    found.append((entry.name, namespace, str(entry.pattern)))

    walk(get_resolver().url_patterns)
    return found


def test_every_console_url_is_in_the_matrix():
    routes = console_routes()
    assert routes, "the resolver walk found no console URL"
    missing = [f"/{pattern} (name {name!r})" for name, _, pattern in routes if name not in MATRIX]
    assert not missing, f"console URLs missing from MATRIX: {missing}"
    unnamed = [pattern for name, _, pattern in routes if not name]
    assert not unnamed, f"console URLs need a name to be in the matrix: {unnamed}"
    stale = sorted(set(MATRIX) - {name for name, _, _ in routes})
    assert not stale, f"MATRIX lists URLs that no longer exist: {stale}"
    assert {ns for _, ns, _ in routes} == {"recovery"}


def test_every_matrix_row_covers_every_method_and_role():
    for name, methods in MATRIX.items():
        assert set(methods) == {"GET", "POST"}, name
        for method, by_role in methods.items():
            assert set(by_role) == set(ROLES), f"{name} {method}"


@pytest.fixture
def urls(story, people):
    """A concrete URL for every route name, on objects the actions can find."""
    from django.urls import reverse

    from intake import answers

    op = story.operation("unknown", attention="lookup_failed", attempts=["uncertain"])
    enquiry = story.enquiry("ready_for_review")
    reply = answers.receive_answer(
        None, channel="email", text="a reply", uploads=[answers.Upload("a.pdf", b"%PDF-1.4")]
    )
    args = {
        "answer": [reply.pk],
        "answer-attach": [reply.pk],
        "answer-set-aside": [reply.pk],
        "answer-file": [reply.pk, reply.files.get().pk],
        "enquiry": [enquiry.reference],
        "review-item": [enquiry.reference],
        "review-attach-as-reply": [enquiry.reference],
        "operation": [op.pk],
        "backlog": ["crm"],
        "integration-settings": ["crm"],
        "pause": ["crm"],
        "resume": ["crm"],
        "release": ["crm"],
        "check_integration": ["crm"],
        "runbook": ["unknown-outcome"],
        "bulk-results": ["not-kept"],
        "setup-queue": ["default"],
        "setup-category": ["waste"],
        "person": [people["coordinator"].pk],
        "document-correct": [enquiry.reference, 999999],
        "document-reprocess": [enquiry.reference, 999999],
        "message-template": ["enquiry_received"],
        "enquiry-preview": [enquiry.reference, "request_information"],
    }
    result = {}
    for name in MATRIX:
        if name in ("enquiry-preview",):
            result[name] = reverse(f"recovery:{name}", args=args[name])
        elif name.startswith("op-") or name == "op-card":
            result[name] = reverse(f"recovery:{name}", args=[op.pk])
        elif name.startswith("enquiry-"):
            result[name] = reverse(f"recovery:{name}", args=[enquiry.reference])
        else:
            result[name] = reverse(f"recovery:{name}", args=args.get(name, []))
    return result


def test_matrix(urls, client_for):
    """One test walks the whole matrix (a single database set-up keeps it quick)."""
    failures = []
    for role in ROLES:
        client = client_for(role)
        for name, methods in MATRIX.items():
            for method, by_role in methods.items():
                response = getattr(client, method.lower())(urls[name])
                expected = by_role[role]
                if response.status_code != expected:
                    failures.append(
                        f"{method} {urls[name]} as {role or 'anonymous'}: "
                        f"{response.status_code}, expected {expected}"
                    )
                if response.status_code == 302 and role is None and name != "metrics":
                    assert response["Location"].startswith("/accounts/login/"), urls[name]
    assert not failures, "\n".join(failures)


# --- the registry of operator actions (recovery.operator_actions) --------------------------------


def test_every_operator_action_has_its_route_in_the_matrix():
    """The routes are made from the registry: each action is a console URL the matrix covers."""
    from recovery.operator_actions import ACTIONS

    assert ACTIONS
    for action in ACTIONS.values():
        route = {"operation": "op-", "enquiry": "enquiry-", "integration": ""}[action.subject]
        assert f"{route}{action.segment}" in MATRIX, action.name


def test_the_enquiry_actions_refuse_exactly_the_roles_the_registry_leaves_out(people):
    """Who may take an enquiry action is its registry row: the matrix's 403s say the same."""
    from recovery.operator_actions import ENQUIRY_ACTIONS

    assert ENQUIRY_ACTIONS
    for action in ENQUIRY_ACTIONS.values():
        expected = MATRIX[f"enquiry-{action.segment}"]["POST"]
        for role, user in people.items():
            assert (expected[role] == 403) == (not action.may(user)), (action.name, role)


def test_the_roles_page_lists_every_operator_action_as_the_registry_says():
    from pathlib import Path

    from django.conf import settings

    from recovery.operator_actions import markdown_table

    text = (Path(settings.BASE_DIR) / "docs" / "roles.md").read_text()
    block = text.split("<!-- operator-actions -->\n", 1)[1].split("<!-- /operator-actions -->")[0]
    assert block == markdown_table()


def test_an_action_that_e_mails_the_resident_is_said_to_change_a_destination():
    """Request information and Reject send the resident's message through the notification
    integration: the roles table (generated) and the form say they change a destination."""
    from recovery.forms import ResidentMessageForm
    from recovery.operator_actions import ACTIONS

    writing = [a for a in ACTIONS.values() if a.form is ResidentMessageForm]
    assert {a.name for a in writing} >= {"request_information", "reject"}
    assert all(a.changes_external for a in writing)
