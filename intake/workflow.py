"""What every state machine in Handover shares: who the actor is and who may fire a transition.

Transition methods take keyword-only ``actor``, ``reason`` and ``evidence``. The actor is a
``User`` (a person in the console) or a string: ``system:<worker>`` for a worker or the
sweeper, ``model:<name@version>`` for a model's proposal. Application code decides whether a
transition is allowed: a guard on django-fsm's ``pre_transition`` signal checks the actor
against the transition's ``permission`` (people) or its ``custom["actors"]`` (system and
model prefixes) before anything changes, so no view or task can skip it.
"""

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied
from django.dispatch import receiver
from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from django_fsm.signals import post_transition, pre_transition

from intake.visible import has_visible_text

SYSTEM = "system"
MODEL = "model"
# A resident answering on their own enquiry: "resident:page" or "resident:email"
# (intake.answers); the resident is not a user, the signed link or address stands for them.
RESIDENT = "resident"
REASON_REQUIRED = _("Give a reason: it is written to the journal.")
RESIDENT_MESSAGE_REQUIRED = _(
    "Write the message to the resident: it is what they read (the reason stays inside)."
)


class ActionRefused(ValueError):
    """The item's state, its policy or the request does not allow this action now; nothing
    changed. The one refusal of every action, on an enquiry (intake.services) or an operation
    or integration (ledger.services)."""


def require_reason(reason, *, actor=None) -> str:
    """The one reason rule: a reason with visible text, written to the journal; returned
    stripped. Given ``actor``, only a person must give one (a worker's or a model's transition
    names its own)."""
    reason = (reason or "").strip()
    if has_visible_text(reason):
        return reason
    if actor is None or isinstance(actor, AbstractBaseUser):
        raise ActionRefused(REASON_REQUIRED)
    return reason


def actor_label(actor) -> str:
    if isinstance(actor, AbstractBaseUser):
        return f"user:{actor.get_username()}"
    return str(actor)


def system_actor(name: str) -> str:
    return f"{SYSTEM}:{name}"


def _transition_meta(instance, name, source):
    method = getattr(type(instance), name, None)
    meta = getattr(method, "_django_fsm", None)
    if meta is None:
        return None
    return meta.get_transition(source)


@receiver(pre_transition, dispatch_uid="handover.guard_transition_actor")
def guard_transition_actor(sender, instance, name, source, target, method_kwargs, **kwargs):
    actor = method_kwargs.get("actor")
    if actor is None:
        raise PermissionDenied(f"{sender.__name__}.{name} needs an actor")
    transition = _transition_meta(instance, name, source)
    if transition is None:
        return  # django-fsm refuses the transition itself
    if isinstance(actor, AbstractBaseUser):
        if not actor.is_active or transition.permission is None:
            raise PermissionDenied(f"{actor_label(actor)} may not {name} (people cannot)")
        if not transition.has_perm(instance, actor):
            raise PermissionDenied(f"{actor_label(actor)} may not {name}")
        return
    prefix = str(actor).split(":", 1)[0]
    allowed = (transition.custom or {}).get("actors", ())
    if prefix not in allowed:
        raise PermissionDenied(f"{actor} may not {name}")


@receiver(post_transition, dispatch_uid="handover.stamp_state_change")
def stamp_state_change(sender, instance, **kwargs):
    if hasattr(instance, "state_changed_at"):
        instance.state_changed_at = timezone.now()
