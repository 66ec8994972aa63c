"""Demo stories whose CRM write went wrong: the recovery queues (see demo.stories)."""

from ledger.models import Action
from recovery.demo.steps import WORKER, Call, Intake, Step, Story, Write, approve, lookup

CRM = Action.CREATE_ENQUIRY
# The CRM write's first transitions: approved with the enquiry, claimed by a worker.
CLAIMED = ((0, "approve", "revision 1 approved"), (0.1, "submit", "claimed"))


def timed_out(minutes, message="ReadTimeout after 10.0 s", took=10.0):
    """A call sent without an answer: it may or may not have happened."""
    return Call(minutes, "uncertain", error_class="uncertain", error_message=message, took=took)


TROUBLE = (
    # TEST-001: the CRM timed out after the request was sent; the lookup that followed failed.
    Story(
        "Website very slow",
        "Test Resident",
        "test-001@example.org",
        "The council website has been very slow all week; the bin collection "
        "page takes a minute to load and the payment form times out.",
        hours_ago=1.5,
        category="website",
        reference="TEST-001",
        owner="coordinator",
        deliveries=3,
        steps=(
            Intake(explanation="Mentions the website, a slow page and an online form."),
            approve(12),
            Write(
                CRM,
                "crm",
                12.1,
                (
                    (0, "approve", "revision 1 approved"),
                    (0.1, "submit", "claimed by worker-demo-1"),
                    (0.3, "mark_unknown", "timeout after the request was sent"),
                ),
                attention="lookup_failed",
                error=("uncertain", "ReadTimeout after 10.0 s"),
                attempts=(
                    timed_out(12.2, "ReadTimeout: no answer within 10.0 s"),
                    lookup(
                        13,
                        "lookup_failed",
                        status=503,
                        error_class="transient",
                        error_message="503 Service Unavailable",
                        took=0.2,
                        body='{"error": "search temporarily unavailable"}',
                    ),
                ),
            ),
            Step(12.4, "submit", WORKER, "CRM write started"),
            Step(12.5, "mark_submission_unknown", WORKER, "CRM did not answer"),
        ),
    ),
    # The destination cannot be looked up at all: the reconciliation queue.
    Story(
        "Leak under the kitchen sink",
        "M. Okafor",
        "m.okafor@example.org",
        "Water is leaking under my kitchen sink since "
        "yesterday evening and the cupboard floor is soaked.",
        hours_ago=1.1,
        category="repairs",
        steps=(
            Intake(explanation="Mentions a leak: housing repairs."),
            approve(8),
            Write(
                CRM,
                "crm",
                8.1,
                (
                    *CLAIMED,
                    (0.2, "mark_unknown", "connection lost after sending"),
                ),
                attention="lookup_unavailable",
                error=("uncertain", "Connection reset after sending"),
                attempts=(
                    timed_out(8.2, "ConnectionResetError after the body was sent", took=2.1),
                    lookup(
                        8.3,
                        "lookup_unavailable",
                        status=501,
                        error_class="permanent",
                        error_message="lookup is switched off",
                        took=0.05,
                    ),
                ),
            ),
            Step(8.25, "submit", WORKER),
            Step(8.3, "mark_submission_unknown", WORKER),
        ),
    ),
    # Checked by hand and retried: the retry is queued, the enquiry is still submission_unknown.
    Story(
        "Pothole outside school",
        "D. Osei",
        "d.osei@example.org",
        "There is a deep pothole outside the primary school gate on Elm Road.",
        hours_ago=1.8,
        category="repairs",
        steps=(
            Intake(explanation="Mentions a repair outside a school."),
            approve(20),
            Write(
                CRM,
                "crm",
                20.1,
                (
                    *CLAIMED,
                    (0.2, "mark_unknown", "timeout after the request was sent"),
                    (95, "retry", "lookup is off; searched the CRM by hand: no record", "admin"),
                ),
                attempts=(timed_out(20.15),),
            ),
            Step(20.12, "submit", WORKER),
            Step(20.3, "mark_submission_unknown", WORKER),
        ),
    ),
    # Retries used up against an unavailable CRM: failed, back to approved.
    Story(
        "Missed bin collection",
        "J. Ellis",
        "j.ellis@example.org",
        "My green recycling bin was missed again on Tuesday.",
        hours_ago=3,
        category="waste",
        conflicting_delivery=True,
        steps=(
            Intake(explanation="Mentions a bin and recycling: bins and waste."),
            approve(30),
            Write(
                CRM,
                "crm",
                30.1,
                (
                    (0, "approve", "revision 1 approved"),
                    (0.1, "submit", "attempt 3 of 3"),
                    (0.2, "fail", "retry budget used: 503 on every attempt"),
                ),
                attention="retry_budget_exhausted",
                error=("transient", "503 Service Unavailable"),
                attempts=tuple(
                    Call(
                        30.1 + i,
                        "transient",
                        status=503,
                        error_class="transient",
                        error_message="503 Service Unavailable",
                        took=0.1,
                    )
                    for i in range(3)
                ),
            ),
            Step(30.15, "submit", WORKER),
            Step(30.2, "delivery_failed", WORKER, "CRM unavailable; retries used up"),
        ),
    ),
    # Refused as invalid: an edit is needed, not a retry.
    Story(
        "Damp in bedroom",
        "A. Nowak",
        "a.nowak@example.org",
        "There is black mould spreading on the bedroom wall by the window.",
        hours_ago=26,
        category="repairs",
        review_outcome="overridden",
        steps=(
            Intake(explanation="Mentions damp: housing repairs."),
            approve(40),
            Write(
                CRM,
                "crm",
                40.1,
                (
                    *CLAIMED,
                    (0.2, "fail", "422 from the CRM"),
                ),
                attention="invalid",
                error=("invalid", "phone: required for housing repairs"),
                attempts=(
                    Call(
                        40.15,
                        "invalid",
                        status=422,
                        error_class="invalid",
                        error_message="phone: required for housing repairs",
                        body='{"errors": {"phone": ["required for housing repairs"]}}',
                    ),
                ),
            ),
            Step(40.12, "submit", WORKER),
            Step(40.2, "delivery_failed", WORKER, "CRM refused the request as invalid"),
        ),
    ),
    # Delivered; the customer's acknowledgement failed on its own (the CRM write stands).
    Story(
        "Bulky waste collection",
        "P. Singh",
        "p.singh@example.org",
        "I would like to book a bulky waste collection for an old sofa.",
        hours_ago=6,
        category="waste",
        steps=(
            # Its acknowledgement failed when it arrived: sending it now would say nobody has
            # read an enquiry that has been passed on, so a retry is cancelled, not sent.
            Write(
                Action.SEND_NOTICE,
                "notify",
                0.02,
                (
                    (0, "approve", "acknowledgement"),
                    (0.01, "submit", "claimed"),
                    (0.1, "fail", "retry budget used"),
                ),
                attention="retry_budget_exhausted",
                error=("transient", "connection refused"),
                attempts=tuple(
                    Call(
                        0.03 + i * 0.03,
                        "transient",
                        error_class="transient",
                        error_message="ConnectionRefusedError: the provider is not listening",
                    )
                    for i in range(3)
                ),
            ),
            Intake(explanation="Mentions waste collection."),
            approve(15),
            Write(
                CRM,
                "crm",
                15.1,
                (
                    *CLAIMED,
                    (0.2, "mark_unknown", "timeout after the request was sent"),
                    (1.2, "confirm", "reconciled: the CRM holds CRM-20431 for this reference"),
                ),
                external_id="CRM-20431",
                records=("CRM-20431",),
                attempts=(
                    timed_out(15.15),
                    lookup(16.2, "found", status=200, body='[{"id": "CRM-20431"}]'),
                ),
            ),
            Step(15.12, "submit", WORKER),
            Step(15.2, "confirm", WORKER, "CRM record CRM-20431"),
        ),
    ),
    # The CRM holds two records for one reference.
    Story(
        "Cannot log in to my account",
        "R. Hughes",
        "r.hughes@example.org",
        "The login page says my password is wrong but the reset link never arrives.",
        hours_ago=50,
        category="website",
        steps=(
            Intake(explanation="Mentions login: website and online services."),
            approve(5),
            Write(
                CRM,
                "crm",
                5.1,
                (
                    *CLAIMED,
                    (0.2, "mark_unknown", "timeout"),
                ),
                # What the engine does when a look-up finds two: unknown, for a person
                # (ledger.execution.reconciling), the records kept in the result.
                attention="duplicate_records",
                error=("uncertain", "ReadTimeout"),
                result={"duplicates": ["CRM-19001", "CRM-19002"]},
                records=("CRM-19001", "CRM-19002"),
                attempts=(
                    timed_out(5.2, "ReadTimeout"),
                    lookup(
                        8,
                        "duplicate",
                        status=200,
                        body='[{"id": "CRM-19001"}, {"id": "CRM-19002"}]',
                    ),
                ),
            ),
            Step(5.15, "submit", WORKER),
            Step(5.3, "mark_submission_unknown", WORKER),
        ),
    ),
)
