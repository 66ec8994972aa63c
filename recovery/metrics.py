"""The queue's figures, read from the database when asked: the dashboard and /metrics.

"Measure the queue, not only the model": duplicate actions (attempted, prevented), unresolved
submissions, the oldest queue item, manual recovery time, completed enquiries. Classification
quality is kept apart, so a good model score cannot hide stranded queue.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import connection
from django.db.models import Count, F, Max, Min, OuterRef, Q, Subquery, Sum
from django.utils import timezone
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from intake.models import Enquiry, EnquiryState, EventConflict, IntakeEvent, Suggestion
from ledger.models import JournalEntry, Operation, OperationState
from recovery import queue
from recovery.models import Queue, QueueVisit, ResponsePolicy
from recovery.words import CUSTOMER_AFFECTING_ACTIONS

# Queue-age buckets for the dashboard's chart: (label, upper bound).
AGE_BUCKETS = [
    ("< 1 h", timedelta(hours=1)),
    ("1-4 h", timedelta(hours=4)),
    ("4-24 h", timedelta(days=1)),
    ("1-3 d", timedelta(days=3)),
    ("> 3 d", None),
]
RECOVERY_WINDOW = timedelta(days=30)
RECOVERY_SAMPLE = 1000
OP = "ledger.operation"


@dataclass
class QueueFlag:
    queue: str
    label: str
    cadence: timedelta
    last_opened: datetime | None
    stale: bool
    # What waits in it now (the queue's own rows: the link opens exactly these), and, for
    # enquiries whose submission is unknown, how many wait as their CRM write's row instead.
    items: int = 0
    as_write: int = 0


@dataclass
class Figures:
    now: datetime
    queue_total: int = 0
    queue_overdue: int = 0
    queue_by_kind: dict = field(default_factory=dict)
    oldest_since: datetime | None = None
    age_buckets: list = field(default_factory=list)  # [(label, count)]
    duplicates: dict = field(default_factory=dict)
    duplicates_attempted: int = 0
    duplicates_prevented: int = 0
    unresolved_submissions: dict = field(default_factory=dict)
    receipts_pending: int = 0
    receipt_oldest: datetime | None = None
    median_recovery: timedelta | None = None
    recoveries: int = 0
    completed: int = 0
    completed_7d: int = 0
    classification: dict = field(default_factory=dict)
    stale_queues: list = field(default_factory=list)
    recovery_by_queue: list = field(default_factory=list)  # [Recovery]

    @property
    def oldest_age(self) -> timedelta | None:
        return self.now - self.oldest_since if self.oldest_since else None

    @property
    def unresolved_submissions_total(self) -> int:
        return sum(self.unresolved_submissions.values())

    @property
    def max_bucket(self) -> int:
        return max([count for _, count in self.age_buckets] + [1])


def queue_summary(now):
    """Totals, overdue, oldest and age buckets of the whole queue in one query over the union."""
    sql, params = queue.whole(now)
    cases, bucket_params, lower = [], [], None
    for _label, upper in AGE_BUCKETS:
        conditions = []
        if lower is not None:
            conditions.append("u.q_since <= %s")
            bucket_params.append(now - lower)
        if upper is not None:
            conditions.append("u.q_since > %s")
            bucket_params.append(now - upper)
        cases.append(f"COUNT(*) FILTER (WHERE {' AND '.join(conditions)})")
        lower = upper
    query = (
        "SELECT COUNT(*), COUNT(*) FILTER (WHERE u.q_overdue = 1), MIN(u.q_since), "
        + ", ".join(cases)
        + f" FROM ({sql}) AS u"
    )
    with connection.cursor() as cursor:
        # The bucket bounds come first in the statement, the union's own parameters after.
        cursor.execute(query, [*bucket_params, *params])
        row = cursor.fetchone()
    total, overdue, oldest, *buckets = row
    return total, overdue, oldest, [(AGE_BUCKETS[i][0], n) for i, n in enumerate(buckets)]


def duplicates():
    redelivered = IntakeEvent.objects.aggregate(n=Sum(F("deliveries") - 1))["n"] or 0
    conflicts = EventConflict.objects.count()
    journal = JournalEntry.objects.filter(subject_type=OP).aggregate(
        # An uncertain write found at the destination by reconciliation: the blind retry that
        # would have made a second record was never sent.
        reconciled=Count(
            "pk",
            filter=Q(
                from_state=OperationState.UNKNOWN,
                to_state=OperationState.CONFIRMED,
                actor_user__isnull=True,
            ),
        ),
    )
    # Operations whose look-up found more than one record: journalled when found, or waiting
    # for a person as duplicates now (the item page says so; this figure must agree with it).
    detected = set(
        JournalEntry.objects.filter(action="ledger.operation.duplicate_detected").values_list(
            "subject_id", flat=True
        )
    )
    detected |= {
        str(pk)
        for pk in Operation.objects.filter(attention="duplicate_records").values_list(
            "pk", flat=True
        )
    }
    return {
        "event_redelivered": redelivered,
        "event_conflict": conflicts,
        "reconciled_not_retried": journal["reconciled"],
        "duplicate_record_detected": len(detected),
    }


def manual_recovery(now):
    """(median time from 'needs a person' to a person's decision, how many) over 30 days."""
    entered = Subquery(
        JournalEntry.objects.filter(
            subject_type=OP,
            subject_id=OuterRef("subject_id"),
            to_state__in=[OperationState.UNKNOWN, OperationState.FAILED],
            at__lte=OuterRef("at"),
        )
        .order_by("-at")
        .values("at")[:1]
    )
    decisions = (
        JournalEntry.objects.filter(
            subject_type=OP,
            actor_user__isnull=False,
            at__gte=now - RECOVERY_WINDOW,
            from_state__in=[OperationState.UNKNOWN, OperationState.FAILED],
        )
        .annotate(entered=entered)
        .exclude(entered__isnull=True)
        .order_by("-at")
        .values_list("at", "entered")[:RECOVERY_SAMPLE]
    )
    # Decisions that are not transitions (reconcile now) are journalled without a from_state.
    requested = (
        JournalEntry.objects.filter(
            subject_type=OP,
            actor_user__isnull=False,
            at__gte=now - RECOVERY_WINDOW,
            action="recovery.operation.reconcile_requested",
        )
        .annotate(entered=entered)
        .exclude(entered__isnull=True)
        .order_by("-at")
        .values_list("at", "entered")[:RECOVERY_SAMPLE]
    )
    seconds = [(at - entered).total_seconds() for at, entered in [*decisions, *requested]]
    if not seconds:
        return None, 0
    return timedelta(seconds=statistics.median(seconds)), len(seconds)


# The queues whose items a person resolves, by the journal's subject and the state they wait in.
RECOVERY_QUEUES = [
    (OP, OperationState.UNKNOWN, Queue.UNKNOWN),
    (OP, OperationState.FAILED, Queue.FAILED),
    ("intake.enquiry", EnquiryState.NEEDS_INFORMATION, Queue.NEEDS_INFORMATION),
    ("intake.enquiry", EnquiryState.SUBMISSION_UNKNOWN, Queue.SUBMISSION_UNKNOWN),
]


@dataclass
class Recovery:
    queue: str
    label: str
    count: int
    median: timedelta | None
    p90: timedelta | None


def _nearest_rank(ordered: list[float], share: float) -> float:
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def recovery_by_queue(now) -> list[Recovery]:
    """Manual recovery time per queue over RECOVERY_WINDOW, from the journal: from the moment an
    item entered the queue's state to the person's action that resolved it (median and 90th
    percentile, nearest rank). Resolved: the item left the state. By a person's own transition
    (complete by hand, cancel, retry, information received) that action's time counts; left by
    the system after a person asked for it (a reconcile requested, then confirmed), the time of
    the request counts; left by the system alone, it is no manual recovery and not counted.
    At most RECOVERY_SAMPLE of the newest resolutions per queue are read."""
    result = []
    for subject_type, state, queue_name in RECOVERY_QUEUES:
        entered = Subquery(
            JournalEntry.objects.filter(
                subject_type=subject_type,
                subject_id=OuterRef("subject_id"),
                to_state=state,
                at__lte=OuterRef("at"),
            )
            .order_by("-at", "-id")
            .values("at")[:1]
        )
        asked = Subquery(
            JournalEntry.objects.filter(
                subject_type=subject_type,
                subject_id=OuterRef("subject_id"),
                actor_user__isnull=False,
                action="recovery.operation.reconcile_requested",
                at__gte=OuterRef("entered"),
                at__lte=OuterRef("at"),
            )
            .order_by("at", "id")
            .values("at")[:1]
        )
        left = (
            JournalEntry.objects.filter(
                subject_type=subject_type, from_state=state, at__gte=now - RECOVERY_WINDOW
            )
            .exclude(to_state=state)
            .annotate(entered=entered)
            .exclude(entered__isnull=True)
            .annotate(asked=asked)
            .filter(Q(actor_user__isnull=False) | Q(asked__isnull=False))
            .order_by("-at")
            .values_list("at", "entered", "asked", "actor_user")[:RECOVERY_SAMPLE]
        )
        seconds = sorted(
            ((at if person else asked) - entered).total_seconds()
            for at, entered, asked, person in left
        )
        median = timedelta(seconds=statistics.median(seconds)) if seconds else None
        p90 = timedelta(seconds=_nearest_rank(seconds, 0.9)) if seconds else None
        result.append(Recovery(queue_name, Queue(queue_name).label, len(seconds), median, p90))
    return result


def classification_quality():
    outcomes = dict(
        Suggestion.objects.exclude(review_outcome="")
        .values_list("review_outcome")
        .annotate(n=Count("pk"))
        .values_list("review_outcome", "n")
    )
    totals = Suggestion.objects.aggregate(
        total=Count("pk"),
        unresolved=Count("pk", filter=Q(label=Suggestion.UNRESOLVED)),
        turned_away=Count("pk", filter=~Q(validation="valid")),
    )
    return {
        "suggestions": totals["total"],
        "unresolved": totals["unresolved"],
        "turned_away": totals["turned_away"],
        "accepted": outcomes.get("accepted", 0),
        "overridden": outcomes.get("overridden", 0),
        "left_unresolved": outcomes.get("unresolved", 0),
    }


def queue_waiting(now) -> dict:
    """Queue -> (rows now, when its oldest waiting item entered it), read from the queue's own
    SQL (the page and this cannot disagree); queues with nothing waiting are absent."""
    sql, params = queue.whole(now)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT u.q_queue, COUNT(*), MIN(u.q_since) FROM ({sql}) AS u GROUP BY u.q_queue",
            params,
        )
        return {queue: (count, since) for queue, count, since in cursor.fetchall()}


def stale_queues(now) -> list[QueueFlag]:
    """Queues nobody opened within their review cadence (the queue's policy, else the default),
    with what waits in each: the dashboard links only to a list that holds something.

    A queue's cadence runs while work waits in it: it starts when the oldest waiting item
    entered the queue. An empty queue is never flagged, so a fresh install (nothing waiting
    anywhere) says nothing was missed, and a queue that gets its first item is flagged once that
    item has waited a cadence with nobody opening the queue since.
    """
    policies = {
        p.queue: p.review_cadence for p in ResponsePolicy.objects.filter(integration__isnull=True)
    }
    default = policies.get("")
    last = dict(
        QueueVisit.objects.values_list("queue")
        .annotate(last=Max("opened_at"))
        .values_list("queue", "last")
    )
    waiting = queue_waiting(now)
    review = Enquiry.objects.filter(state=EnquiryState.READY_FOR_REVIEW, category__isnull=False)
    oldest_review = review.aggregate(since=Min("state_changed_at"))["since"]
    if oldest_review is not None:
        waiting[Queue.REVIEW.value] = (review.count(), oldest_review)
    # An enquiry whose submission is unknown waits in the queue as its CRM write's row: it
    # counts as waiting in "Enquiry submission unknown" too, from when it entered that state.
    unknown = Enquiry.objects.filter(state=EnquiryState.SUBMISSION_UNKNOWN).aggregate(
        count=Count("pk"), since=Min("state_changed_at")
    )
    unknown_enquiries = unknown["count"]
    flags = []
    for each in Queue:
        cadence = policies.get(each.value, default)
        if cadence is None:
            continue
        opened = last.get(each.value)
        items, since = waiting.get(each.value, (0, None))
        if each == Queue.SUBMISSION_UNKNOWN and unknown_enquiries > items:
            since = min(filter(None, (since, unknown["since"])))
        flags.append(
            QueueFlag(
                queue=each.value,
                label=each.label,
                cadence=cadence,
                last_opened=opened,
                stale=since is not None
                and since < now - cadence
                and (opened is None or opened < now - cadence),
                items=items,
                as_write=max(0, unknown_enquiries - items)
                if each == Queue.SUBMISSION_UNKNOWN
                else 0,
            )
        )
    return flags


def figures(now=None) -> Figures:
    now = now or timezone.now()
    result = Figures(now=now)
    total, overdue, oldest, buckets = queue_summary(now)
    result.queue_total, result.queue_overdue, result.oldest_since = total, overdue, oldest
    result.age_buckets = buckets
    result.duplicates = duplicates()
    result.duplicates_attempted = sum(result.duplicates.values())
    result.duplicates_prevented = (
        result.duplicates_attempted - result.duplicates["duplicate_record_detected"]
    )
    result.unresolved_submissions = dict(
        Operation.objects.filter(
            state__in=[OperationState.UNKNOWN, OperationState.FAILED],
            action__in=CUSTOMER_AFFECTING_ACTIONS,
        )
        .values_list("state")
        .annotate(n=Count("pk"))
        .values_list("state", "n")
    )
    result.unresolved_submissions.setdefault(OperationState.UNKNOWN, 0)
    result.unresolved_submissions.setdefault(OperationState.FAILED, 0)
    # The partial index enquiry_receipt_pending holds only these rows.
    pending = Enquiry.objects.filter(receipt_pending=True).aggregate(
        n=Count("pk"), oldest=Min("created_at")
    )
    result.receipts_pending, result.receipt_oldest = pending["n"], pending["oldest"]
    result.median_recovery, result.recoveries = manual_recovery(now)
    result.recovery_by_queue = recovery_by_queue(now)
    completed = Enquiry.objects.filter(state=EnquiryState.CONFIRMED).aggregate(
        total=Count("pk"), week=Count("pk", filter=Q(closed_at__gte=now - timedelta(days=7)))
    )
    result.completed, result.completed_7d = completed["total"], completed["week"]
    result.classification = classification_quality()
    result.stale_queues = stale_queues(now)
    return result


class ConsoleCollector:
    """Prometheus collector: the same figures, read from the database at scrape time."""

    def describe(self):
        return []  # nothing is read when the collector is registered, only when scraped

    def collect(self):
        f = figures()
        dup = CounterMetricFamily(
            "handover_duplicate_actions_attempted",
            "Duplicate actions that reached Handover, by kind.",
            labels=["kind"],
        )
        for kind, n in f.duplicates.items():
            dup.add_metric([kind], n)
        yield dup
        yield CounterMetricFamily(
            "handover_duplicate_actions_prevented",
            "Duplicate actions stopped before they changed a destination.",
            value=f.duplicates_prevented,
        )
        unresolved = GaugeMetricFamily(
            "handover_unresolved_submissions",
            "External writes whose outcome is unknown or failed.",
            labels=["state"],
        )
        for state, n in sorted(f.unresolved_submissions.items()):
            unresolved.add_metric([state], n)
        yield unresolved
        yield GaugeMetricFamily(
            "handover_queue_items", "Items waiting for a person.", value=f.queue_total
        )
        yield GaugeMetricFamily(
            "handover_receipts_pending",
            "Enquiries whose receipt work no worker has proposed yet.",
            value=f.receipts_pending,
        )
        yield GaugeMetricFamily(
            "handover_receipt_pending_oldest_age_seconds",
            "Age of the oldest enquiry whose receipt work is not proposed (0 when none): "
            "more than a few minutes means no cluster is running, or a receipt keeps failing.",
            value=(f.now - f.receipt_oldest).total_seconds() if f.receipt_oldest else 0.0,
        )
        yield GaugeMetricFamily(
            "handover_queue_overdue_items",
            "Queue items past their response period.",
            value=f.queue_overdue,
        )
        age = f.oldest_age.total_seconds() if f.oldest_age else 0.0
        yield GaugeMetricFamily(
            "handover_queue_oldest_item_age_seconds",
            "Age of the oldest item in the queue (0 when empty).",
            value=age,
        )
        yield GaugeMetricFamily(
            "handover_manual_recovery_median_seconds",
            "Median time from 'needs a person' to a person's decision (30 days).",
            value=f.median_recovery.total_seconds() if f.median_recovery else 0.0,
        )
        by_queue = GaugeMetricFamily(
            "handover_manual_recovery_seconds",
            "Time from entering a queue to the person's action that resolved it, by queue "
            "(quantile 0.5 and 0.9, 30 days; 0 when none).",
            labels=["queue", "quantile"],
        )
        for r in f.recovery_by_queue:
            for quantile, value in (("0.5", r.median), ("0.9", r.p90)):
                by_queue.add_metric([r.queue, quantile], value.total_seconds() if value else 0.0)
        yield by_queue
        yield CounterMetricFamily(
            "handover_enquiries_completed",
            "Enquiries confirmed by the CRM.",
            value=f.completed,
        )
        stale = GaugeMetricFamily(
            "handover_queue_unopened",
            "1 when nobody opened the queue within its review cadence.",
            labels=["queue"],
        )
        for flag in f.stale_queues:
            stale.add_metric([flag.queue], 1 if flag.stale else 0)
        yield stale
        quality = GaugeMetricFamily(
            "handover_classification_suggestions",
            "Classification quality, kept apart from delivery: suggestions by outcome.",
            labels=["outcome"],
        )
        for outcome, n in f.classification.items():
            quality.add_metric([outcome], n)
        yield quality
