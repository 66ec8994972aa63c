"""The drill's conversation case: the resident answers the same enquiry by its page (over HTTP,
the link read from the message the relay received) and by e-mail (a signed Mailgun inbound post
threaded by our Message-ID), each delivered twice, each landing once."""

from __future__ import annotations

import email
import email.policy
import hashlib
import hmac
import re
import secrets
import time

from django.conf import settings

from harness.drill.cases.email import mail_relay
from harness.drill.cases.steps import CLEANUP, CLEANUP_FOR_RESIDENT
from harness.drill.results import CaseFailed, CaseResult
from harness.drill.runner import Drill
from intake.models import Enquiry, EnquiryState, Revision
from intake.services import reject_enquiry, request_information
from ledger import notices
from ledger.models import Operation, OperationState

ASK_REASON = "drill: the resident's answer is needed"
ASK_RESIDENT = "Please tell us where the bin is: the street and the nearest house number."
ANSWER = "It is on Mill Lane, outside number 14."
_TOKEN = re.compile(r"/r/([A-Za-z0-9_:\-]+)/")
_CSRF = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')
_SUBMISSION = re.compile(r'name="submission" value="([^"]+)"')
# A reply as Mailgun posts it ("body-mime": the message as received), threaded by In-Reply-To.
REPLY_MIME = (
    "Message-ID: <drill-{own}@mail.example.org>\r\nIn-Reply-To: {parent}\r\n"
    "References: {parent}\r\nDate: Sat, 5 Dec 2026 00:20:03 +0000\r\n"
    "From: Drill Case <drill@example.org>\r\nTo: council@example.org\r\n"
    "Subject: Re: We need more information about your enquiry {reference}\r\n"
    "MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n"
    "{answer}\r\n\r\nOn Sat, Handover wrote:\r\n> We need more information\r\n"
)


def _asked(d: Drill, relay, enquiry) -> tuple[Operation, str, int]:
    """Ask the resident for more; wait for the message at the relay. Its operation, its
    Message-ID and how many messages the relay received with it."""
    request_information(
        enquiry.pk, actor=d.editor, reason=ASK_REASON, resident_message=ASK_RESIDENT
    )
    op = (
        Operation.objects.filter(enquiry=enquiry, payload__template=notices.NEEDS_INFORMATION)
        .order_by("-created_at")
        .first()
    )
    if op is None:
        raise CaseFailed("no needs-information message was proposed")
    op = d.wait_operation(
        op, lambda o: o.state == OperationState.CONFIRMED, "the needs-information message"
    )
    message_id = notices.message_id(op.idempotency_key)
    return op, message_id, relay.count(message_id)


def _link_token(relay, message_id: str) -> str:
    """The resident page's token from the link in the message the relay received."""
    record = next((m for m in relay.messages() if m.get("message_id") == message_id), None)
    if record is None:
        raise CaseFailed(f"the relay has no message {message_id}")
    message = email.message_from_bytes(relay.read(record), policy=email.policy.default)
    text = message.get_body(preferencelist=("plain",)).get_content()
    found = _TOKEN.search(text)
    if found is None:
        raise CaseFailed("the message carries no link to the resident's page")
    return found.group(1)


def _page_answer_twice(d: Drill, token: str) -> list[int]:
    """The resident's page answered as a browser does (GET, then POST with the form's CSRF
    token), the POST sent twice: a double submit."""
    url = f"{d.web.url}/r/{token}/"
    secure = {"X-Forwarded-Proto": "https"}
    page = d.session.get(url, headers=secure, timeout=30)
    found, submission = _CSRF.search(page.text), _SUBMISSION.search(page.text)
    if page.status_code != 200 or found is None or submission is None:
        raise CaseFailed(f"the resident's page answered {page.status_code} with no form")
    # The origin the web server sees: https behind the (simulated) TLS proxy when SECURE is set.
    scheme = "https" if settings.SECURE else "http"
    origin = f"{scheme}://" + d.web.url.split("://", 1)[1]
    headers = {**secure, "Origin": origin, "Referer": f"{origin}/r/{token}/"}
    form = {
        "csrfmiddlewaretoken": found.group(1),
        "submission": submission.group(1),
        "text": ANSWER,
    }
    return [
        d.session.post(
            url, data=form, headers=headers, timeout=30, allow_redirects=False
        ).status_code
        for _ in range(2)
    ]


def _mail_answer_twice(d: Drill, enquiry, parent: str) -> list[str]:
    """One signed inbound post, delivered twice (Mailgun retries until it hears 200)."""
    stamp, token = str(int(time.time())), secrets.token_hex(25)
    signature = hmac.new(
        d.mailgun_key.encode(), f"{stamp}{token}".encode(), hashlib.sha256
    ).hexdigest()
    mime = REPLY_MIME.format(
        own=secrets.token_hex(8), parent=parent, reference=enquiry.reference, answer=ANSWER
    )
    post = {
        "recipient": "council@example.org",
        "sender": "drill@example.org",
        "body-mime": mime,
        "timestamp": stamp,
        "token": token,
        "signature": signature,
    }
    answers = []
    for _ in range(2):
        response = d.session.post(
            f"{d.web.url}/inbound/mailgun/",
            data=post,
            headers={"X-Forwarded-Proto": "https"},
            timeout=30,
        )
        answers.append(f"{response.status_code} {response.text.strip()[:40]}")
    return answers


def _by_resident(enquiry) -> int:
    return Revision.objects.filter(enquiry=enquiry, origin="resident").count()


def resident_replies(d: Drill, case: CaseResult):
    with mail_relay(d) as relay:
        enquiry = d.send(case)
        d.wait_enquiry(enquiry, EnquiryState.READY_FOR_REVIEW)
        d.settle(enquiry)
        enquiries = Enquiry.objects.count()

        # (a) By the page: the link from the message, the form posted twice.
        _op, first_id, first_at_relay = _asked(d, relay, enquiry)
        statuses = _page_answer_twice(d, _link_token(relay, first_id))
        enquiry.refresh_from_db()
        by_page = _by_resident(enquiry)
        state_after_page = enquiry.state
        if state_after_page != EnquiryState.READY_FOR_REVIEW:
            raise CaseFailed(
                f"the page's answer did not land: POSTs answered {statuses}, {by_page} "
                f"revision(s) by the resident, enquiry {state_after_page}"
            )

        # (b) By e-mail: a second question, its reply delivered twice by Mailgun.
        _op, second_id, second_at_relay = _asked(d, relay, enquiry)
        posts = _mail_answer_twice(d, enquiry, second_id)
        enquiry.refresh_from_db()
        by_mail = _by_resident(enquiry) - by_page
        made = Enquiry.objects.count() - enquiries

        case.destination_records = first_at_relay
        case.note(
            f"needs-information messages at the relay: {first_at_relay} with {first_id}, "
            f"{second_at_relay} with {second_id}; page POSTs answered {statuses}: "
            f"{by_page} revision(s) by the resident, enquiry {state_after_page}; inbound posts "
            f"answered {posts}: {by_mail} revision(s) by the resident, enquiry {enquiry.state}; "
            f"{made} new enquiries"
        )
        case.check(first_at_relay == 1, "one needs-information message (page)", first_at_relay)
        case.check(second_at_relay == 1, "one needs-information message (e-mail)", second_at_relay)
        case.check(statuses == [302, 302], "the page took the answer, twice as once", statuses)
        case.check(by_page == 1, "one revision by the resident from two page POSTs", by_page)
        case.check(
            state_after_page == EnquiryState.READY_FOR_REVIEW,
            "back to review after the page",
            state_after_page,
        )
        case.check(all(p.startswith("200") for p in posts), "both inbound posts answered 200")
        case.check(by_mail == 1, "one revision by the resident from two inbound posts", by_mail)
        case.check(
            enquiry.state == EnquiryState.READY_FOR_REVIEW,
            "back to review after the e-mail",
            enquiry.state,
        )
        case.check(made == 0, "no second enquiry", made)
    reject_enquiry(
        enquiry.pk, actor=d.editor, reason=CLEANUP, resident_message=CLEANUP_FOR_RESIDENT
    )
