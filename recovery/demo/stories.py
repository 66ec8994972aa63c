"""The demo's stories: every queue and every state has something in it (played by demo.play).

Each story is one enquiry: who sent it, how many hours ago, and what happened to it since,
minute by minute after it arrived (recovery.demo.steps says what each step means).
"""

from datetime import timedelta

from ledger.models import Action
from recovery.demo.steps import (
    SEED,
    WORKER,
    Call,
    Intake,
    Pause,
    ProposeCompensation,
    Revise,
    Step,
    Story,
    Write,
    approve,
)
from recovery.demo.trouble import TROUBLE
from recovery.models import Queue

H, D = timedelta(hours=1), timedelta(days=1)

# (queue, integration, owner, backup owner, response period, review cadence)
POLICIES = [
    (Queue.UNKNOWN, None, "coordinator", "admin", 2 * H, 4 * H),
    (Queue.FAILED, None, "coordinator", "admin", 4 * H, D),
    (Queue.FAILED, "notify", "coordinator", "admin", 8 * H, D),
    (Queue.SUBMISSION_UNKNOWN, None, "coordinator", "admin", 2 * H, 4 * H),
    (Queue.NEEDS_INFORMATION, None, "reviewer", "admin", 2 * D, D),
    (Queue.UNRESOLVED, None, "reviewer", "admin", 4 * H, D),
    (Queue.REVIEW, None, "reviewer", "admin", D, D),
    (Queue.WAITING_REPLY, None, "reviewer", "admin", D, D),
    (Queue.PAUSED, None, "admin", "coordinator", H, 4 * H),
    ("", None, "admin", "coordinator", D, D),
]

# Before delivery: waiting for the customer, the reviewer, or intake itself.
REVIEW = (
    Story(
        "Boiler",
        "T. Brown",
        "t.brown@example.org",
        "Boiler broken. Please send someone.",
        hours_ago=30,
        category="repairs",
        steps=(
            Intake(explanation="Mentions a boiler: housing repairs."),
            Step(
                45,
                "request_information",
                "reviewer",
                "no address or access times",
                evidence={
                    "resident_message": "Please tell us the address of the property with the "
                    "broken boiler, and the days and times someone can let our engineer in."
                },
            ),
        ),
    ),
    # Unresolved classification, waiting for review.
    Story(
        "The thing on our road",
        "C. Martin",
        "c.martin@example.org",
        "Can someone look at the thing on our road? It has been there for ages.",
        hours_ago=0.8,
        steps=(Intake(suggestion="unresolved: no keyword matched"),),
    ),
    # Ready for review with a confident suggestion; and one edited by the reviewer.
    Story(
        "Recycling bin lid broken",
        "Test Resident",
        "test-001@example.org",
        "The lid of my recycling bin snapped off in the wind.",
        hours_ago=2,
        category="waste",
        steps=(Intake(confidence=0.91, explanation="Mentions a recycling bin: bins and waste."),),
    ),
    Story(
        "heating",
        "L. Chen",
        "l.chen@example.org",
        "No heating in the flat since Friday, two small children at home.",
        hours_ago=4,
        category="repairs",
        steps=(
            Intake(explanation="Mentions heating: housing repairs."),
            Revise(20, "subject clarified", {"subject": "No heating, young children"}),
        ),
    ),
    # Just received, and just checked.
    Story(
        "Street light out",
        "K. Ali",
        "k.ali@example.org",
        "The street light outside number 12 Mill Lane has been out for a week.",
        hours_ago=0.02,
    ),
    Story(
        "Parking permit renewal",
        "S. Doyle",
        "s.doyle@example.org",
        "How do I renew my parking permit?",
        hours_ago=0.05,
        steps=(Step(0.1, "validate", reason="signed event accepted"),),
    ),
    # Received, and its receipt work keeps failing inside Handover: a row for a person.
    Story(
        "Fly-tipping photos",
        "R. Okafor",
        "r.okafor@example.org",
        "Rubbish dumped behind the garages again, photos attached.",
        hours_ago=0.3,
        steps=(Step(0.1, "validate", reason="signed event accepted"),),
        receipt_error="DataError: value too long for type character varying(200)",
    ),
)

# Delivering, delivered, undone, rejected, held.
DELIVERY = (
    # Approved and waiting for a worker (a running worker sends it within seconds); and one in
    # flight: a worker on another machine (worker-demo-1) holds its call, and the demo holds that
    # lease open for an hour so it can be seen (a real lease lasts the cluster's timeout plus
    # 5 s); the sweeper makes it unknown when the lease ends, as for a lost worker.
    Story(
        "Fly-tipping",
        "G. Evans",
        "g.evans@example.org",
        "Someone has dumped rubbish bags behind the shops on Station Road.",
        hours_ago=0.1,
        category="waste",
        steps=(
            Intake(explanation="Mentions rubbish: bins and waste."),
            approve(3),
            Write(Action.CREATE_ENQUIRY, "crm", 3.1, ((0, "approve", "revision 1"),)),
        ),
    ),
    Story(
        "Online form error",
        "H. Wood",
        "h.wood@example.org",
        "The online form shows an error when I press submit.",
        hours_ago=0.05,
        category="website",
        steps=(
            Intake(explanation="Mentions an online form: website."),
            approve(1),
            Write(
                Action.CREATE_ENQUIRY,
                "crm",
                1.1,
                (
                    (0, "approve", "revision 1"),
                    (
                        0.1,
                        "submit",
                        "claimed by worker-demo-1 on another machine; the demo holds "
                        "its lease for an hour",
                    ),
                ),
                attempts=(Call(1.15, "", took=None),),
                lease=("system:worker-demo-1", 60),
            ),
            Step(1.12, "submit", WORKER),
        ),
    ),
    # Delivered and acknowledged; then a compensation proposed for it.
    Story(
        "Broken window latch",
        "N. Price",
        "n.price@example.org",
        "The window latch in the living room is broken and will not close.",
        hours_ago=72,
        category="repairs",
        steps=(
            # Acknowledged when it arrived.
            Write(
                Action.SEND_NOTICE,
                "notify",
                0.02,
                (
                    (0, "approve", "acknowledgement"),
                    (0.01, "submit", "claimed"),
                    (0.02, "confirm", "202"),
                ),
                external_id="MSG-5512",
                records=("MSG-5512",),
                attempts=(Call(0.03, "success", status=202),),
            ),
            Intake(explanation="Mentions broken: housing repairs."),
            approve(10),
            Write(
                Action.CREATE_ENQUIRY,
                "crm",
                10.1,
                (
                    (0, "approve", "revision 1"),
                    (0.1, "submit", "claimed"),
                    (0.2, "mark_unknown", "connection lost after sending"),
                    (0.3, "fail", "lookup unavailable: a person must check"),
                    (52, "confirm", "found CRM-18870 in the CRM by hand", "coordinator"),
                ),
                external_id="CRM-18870",
                records=("CRM-18870",),
                attempts=(
                    Call(
                        10.15,
                        "uncertain",
                        error_class="uncertain",
                        error_message="ConnectionResetError",
                        took=3.0,
                    ),
                ),
            ),
            Step(10.12, "submit", WORKER),
            Step(10.2, "confirm", WORKER),
            ProposeCompensation(
                60 * 24,
                Action.CLOSE_ENQUIRY,
                compensates=Action.CREATE_ENQUIRY,
                reason="sent to repairs by mistake; the tenant moved out",
            ),
        ),
    ),
    # Rejected, with its proposed write cancelled.
    Story(
        "Test please ignore",
        "x",
        "spam@example.org",
        "asdf asdf test",
        hours_ago=20,
        review_outcome="unresolved",
        steps=(
            Intake(suggestion="unresolved: no keyword matched"),
            Write(
                Action.CREATE_ENQUIRY,
                "crm",
                30,
                ((1, "cancel", "enquiry rejected before approval", SEED),),
            ),
            Step(
                31,
                "reject",
                "reviewer",
                "test submission, not a real enquiry",
                evidence={
                    "resident_message": "Your message reads as a test, so we have not passed it "
                    "on. If you do need our help, please write to us again and tell us what it "
                    "is about."
                },
            ),
        ),
    ),
    # The document store is paused, with one read held for the backlog review: approved and
    # waiting, and it stays so (the sweeper leaves held work alone) until an admin resumes the
    # store and releases its backlog.
    Story(
        "Photos of the damage",
        "F. Khan",
        "f.khan@example.org",
        "Photos attached of the ceiling damage after the leak upstairs.",
        hours_ago=0.5,
        category="repairs",
        steps=(
            Intake(explanation="Mentions a leak: housing repairs."),
            Write(
                Action.EXTRACT_DOCUMENT,
                "documents",
                0.5,
                ((0, "approve", "system"),),
                held=True,
                records=("the photos",),
            ),
            Pause(
                6, "documents", "document store returns other tenants' files; vendor investigating"
            ),
        ),
    ),
)

# Played in this order: a journal row's id breaks a tie between rows stamped at the same moment.
STORIES = TROUBLE + REVIEW + DELIVERY
