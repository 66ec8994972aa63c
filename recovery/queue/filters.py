"""What a person asked the queue for: the filters, the sort and the group in the address."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ledger.models import Integration, OperationState
from recovery.models import Queue
from recovery.views.common import whole_number

# The orders a person may choose (?sort=): value -> (label, the union's ORDER BY).
# Within one branch of the union each of these agrees with the branch's own index order
# (due = since + one period), so a page still reads at most offset + size + 1 rows a branch.
SORTS = {
    # Overdue first, then what the customer feels, then the oldest.
    "": ("Most urgent", "q_overdue DESC, q_customer DESC, q_since ASC, q_key ASC"),
    "age": ("Oldest first", "q_since ASC, q_key ASC"),
    "due": ("Response due", "q_due ASC NULLS LAST, q_since ASC, q_key ASC"),
    "attempt": ("Last attempt", "q_attempt DESC NULLS LAST, q_since ASC, q_key ASC"),
}
# How "what failed the same way" is written in an address (?group=): the five parts of a group's
# key, joined by GROUP_SEP (none of them can hold it: names, codes and a number).
GROUP_SEP = "~"


@dataclass(frozen=True)
class GroupKey:
    """Operations that failed the same way: one system, one state, one reason a person must
    look, one error class and HTTP status (as Sentry groups events by cause)."""

    integration: str | None
    state: str
    attention: str
    error_class: str
    status: int | None

    @classmethod
    def parse(cls, value: str) -> GroupKey | None:
        parts = value.split(GROUP_SEP)
        if len(parts) != 5:
            return None
        integration, state, attention, error_class, status = parts
        if integration and integration not in dict(Integration.NAMES):
            return None
        if state not in (OperationState.UNKNOWN, OperationState.FAILED) or not re.fullmatch(
            r"[a-z_]{0,40}", attention
        ):
            return None
        if not re.fullmatch(r"[a-z_]{0,32}", error_class) or not re.fullmatch(
            r"[0-9]{0,3}", status
        ):
            return None
        return cls(
            integration or None, state, attention, error_class, int(status) if status else None
        )

    def __str__(self) -> str:
        parts = (self.integration or "", self.state, self.attention, self.error_class)
        return GROUP_SEP.join([*parts, "" if self.status is None else str(self.status)])


def is_admin(user) -> bool:
    """Whether unowned items fall to this person (recovery.ownership.admins)."""
    if not getattr(user, "is_authenticated", False):
        return False
    return user.is_superuser or user.groups.filter(name="admin").exists()


@dataclass
class Filters:
    owner: str = ""  # a user id, "none" for unowned
    queue: str = ""  # a Queue key
    integration: str = ""  # an Integration name
    overdue: bool = False
    mine: bool = False
    user_id: int | None = None
    # An unowned item falls to the admins (recovery.ownership): an admin's Mine includes it.
    user_is_admin: bool = False
    sort: str = ""  # a key of SORTS
    group: GroupKey | None = None  # one group of operations that failed the same way
    # A value in the address that names nothing: said on the page, never silently "all".
    not_understood: list[str] = field(default_factory=list)

    @classmethod
    def from_request(cls, request) -> Filters:
        get = request.GET
        queue = get.get("state", "")
        integration = get.get("integration", "")
        owner = get.get("owner", "")
        understood = {
            # name: (is the value one we know?, what is shown instead)
            "state": (queue in Queue.values, "all queues"),
            "integration": (integration in dict(Integration.NAMES), "every system"),
            # A user's id within PostgreSQL's bigint ("²" and 10**30 are not understood, not a 500).
            "owner": (owner == "none" or whole_number(owner, maximum=2**63 - 1), "anyone"),
            "overdue": (get.get("overdue") in ("1", "on"), "overdue or not"),
            "mine": (get.get("mine") in ("1", "on"), "everyone's"),
            "sort": (get.get("sort", "") in SORTS, "the most urgent first"),
            "group": (GroupKey.parse(get.get("group", "")) is not None, "every group"),
        }
        not_understood = [
            f"{name} “{get[name][:40]}” not understood; showing {instead}."
            for name, (known, instead) in understood.items()
            if get.get(name) and not known
        ]
        return cls(
            owner=owner if understood["owner"][0] else "",
            queue=queue if understood["state"][0] else "",
            integration=integration if understood["integration"][0] else "",
            overdue=understood["overdue"][0],
            mine=understood["mine"][0],
            user_id=request.user.pk,
            user_is_admin=is_admin(request.user),
            sort=get.get("sort", "") if understood["sort"][0] else "",
            group=GroupKey.parse(get.get("group", "")),
            not_understood=not_understood,
        )

    @property
    def active(self) -> bool:
        return bool(
            self.owner or self.queue or self.integration or self.overdue or self.mine or self.group
        )
