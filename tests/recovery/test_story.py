"""The item's story at a glance (recovery.story, templates/recovery/_story.html): received,
reviewed by whom, each attempt with its outcome, each person's action with its reason, and
the current owner and due time, in the queue's words."""

import re
from datetime import timedelta

from django.urls import reverse
from django.utils import timezone

from ledger import services
from ledger.models import Attempt, Operation
from recovery import timefmt
from recovery.models import Queue, ResponsePolicy


def _story_lines(html: str) -> list[str]:
    section = html[html.index('id="story"') : html.index("</section>", html.index('id="story"'))]
    items = re.findall(r"<li[^>]*>(.*?)</li>", section, flags=re.S)
    return [re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", item)).strip() for item in items]


def test_the_story_tells_who_did_what_and_where_it_stands(story, client_for, people):
    casey = people["coordinator"]
    op = story.operation("unknown", attention="lookup_failed")
    enquiry = op.enquiry
    started = timezone.now()
    Attempt.objects.create(
        operation=op, number=1, worker="w1", outcome="uncertain", started_at=started
    )
    Attempt.objects.create(
        operation=op,
        number=2,
        kind="lookup",
        worker="w1",
        outcome="lookup_failed",
        response_status=503,
        started_at=started + timedelta(milliseconds=1),
    )
    ResponsePolicy.objects.update_or_create(
        queue=Queue.UNKNOWN, integration=None, defaults={"response_period": timedelta(hours=2)}
    )
    while timezone.now() <= started + timedelta(milliseconds=1):
        pass  # the person acts after the look-up (the journal's clock is the same clock)
    services.reassign_operation(
        op.pk, actor=casey, reason="customer <b>rang</b> about it", owner=casey
    )
    html = client_for("coordinator").get(reverse("recovery:enquiry", args=[enquiry.reference]))
    html = html.content.decode()
    # At the top of the page: before "What happened".
    assert html.index('id="story"') < html.index('id="answers"')
    lines = _story_lines(html)
    assert lines[0].endswith("Received from website")
    assert lines[0].startswith(timefmt.local(enquiry.created_at))  # the |when format
    text = "\n".join(lines)
    assert "Approved for delivery by story-reviewer: factory: approve" in text
    assert "Create the enquiry in the CRM, attempt 1: no answer (may have happened)" in text
    assert "Create the enquiry in the CRM, look-up: lookup failed · HTTP 503" in text
    assert (
        "Reassign owner: create the enquiry in the CRM by the-coordinator: "
        "customer &lt;b&gt;rang&lt;/b&gt; about it" in text
    )
    assert "Delivery outcome unknown" in text
    # Oldest first, and the last line says where it stands, in the queue's words.
    assert text.index("attempt 1") < text.index("look-up") < text.index("Reassign owner")
    assert re.fullmatch(
        r"Now: submission unknown · owner the-coordinator \(assigned[^)]*\) · due in .+",
        lines[-1],
    ), lines[-1]


def test_a_long_story_folds_its_middle(story, client_for):
    op = story.operation("failed", attention="retry_budget_exhausted")
    now = timezone.now()
    for number in range(1, 21):
        Attempt.objects.create(
            operation=op,
            number=number,
            worker="w",
            outcome="transient",
            response_status=503,
            started_at=now + timedelta(seconds=number),
        )
    html = client_for("coordinator").get(reverse("recovery:enquiry", args=[op.enquiry.reference]))
    html = html.content.decode()
    section = html[html.index('id="story"') :]
    assert re.search(r"<summary>\d+ more steps</summary>", section)
    assert "attempt 20: unavailable (not accepted) · HTTP 503" in section
    assert Operation.objects.get(pk=op.pk).attempts.count() == 20


def test_a_fresh_enquiry_has_a_short_story(story, client_for):
    enquiry = story.enquiry("ready_for_review", name="")
    html = client_for("reviewer").get(reverse("recovery:enquiry", args=[enquiry.reference]))
    lines = _story_lines(html.content.decode())
    assert lines[0].endswith("Received from website")
    assert lines[-1].startswith("Now: ready for review")
