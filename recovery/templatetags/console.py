"""Template tags for the console: the lifecycle picture, ages, and plain words for codes."""

import json
import re
from datetime import timedelta

from django import template
from django.utils import timezone
from django.utils.safestring import mark_safe

from recovery import diagram, durations, operator_actions, timefmt, words

register = template.Library()


@register.simple_tag
def lifecycle(obj, visited=()):
    """An inline SVG of ``obj``'s state machine with its current state marked."""
    return mark_safe(
        diagram.render_svg(type(obj), current=obj.state, visited=visited, title=str(obj))
    )


def short_duration(delta: timedelta) -> str:
    seconds = max(0, int(delta.total_seconds()))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes = rest // 60
    if days:
        return f"{days} d {hours} h" if hours else f"{days} d"
    if hours:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    return f"{minutes} min" if minutes else "under a minute"


@register.filter
def ago(value):
    """ "3 h ago", or "just now"."""
    if not value:
        return ""
    text = short_duration(timezone.now() - value)
    return "just now" if text == "under a minute" else f"{text} ago"


@register.filter
def age(value, now=None):
    """How long ago ``value`` was, briefly: "3 h 12 min", "2 d 4 h"."""
    if not value:
        return ""
    return short_duration((now or timezone.now()) - value)


@register.filter
def until(value):
    """How long until ``value`` ("in 2 h"), or how long ago it passed ("2 h ago")."""
    if not value:
        return ""
    delta = value - timezone.now()
    if delta.total_seconds() >= 0:
        return f"in {short_duration(delta)}"
    return ago(value)


@register.filter
def duration(value):
    """An elapsed time, briefly ("2 d 4 h"): for ages, where minutes past a day do not matter."""
    return short_duration(value) if value is not None else ""


@register.filter
def period(value):
    """A configured duration exactly as people write it ("1 h 30 min", "2.5 s"): a timedelta or
    a number of seconds. The console's form fields read the same words (recovery.durations)."""
    return durations.format_duration(value)


@register.filter
def action_label(code):
    return words.action_label(code or "")


@register.filter
def in_sentence(label):
    return words.in_sentence(str(label))


@register.filter
def outcome_label(code):
    return words.outcome_label(code)


@register.filter
def attention_label(code):
    return words.ATTENTION.get(code or "", code or "")


@register.filter
def button_label(action):
    return operator_actions.label(action)


@register.filter
def held_noun(integration_name):
    return words.held_noun(integration_name)


@register.filter
def changes_external(action):
    return operator_actions.changes_external(action)


@register.filter
def action_help(action):
    return operator_actions.does(action)


@register.filter
def actor_name(actor):
    """ "user:alice" -> "alice"; "system:worker-1" and "model:x@1" stay as they are."""
    return actor.removeprefix("user:") if actor else ""


@register.filter
def pretty_json(value):
    """A stored payload or result as indented JSON (what the destination was sent or said),
    never Python's repr."""
    return json.dumps(value, ensure_ascii=False, indent=2, sort_keys=True, default=str)


@register.filter
def evidence_lines(evidence):
    """A journal row's evidence as (key, value) lines people read: a plain value as itself, a
    list or a mapping as compact JSON; never Python's repr of a dict."""
    if not isinstance(evidence, dict):
        return [("", json.dumps(evidence, ensure_ascii=False, default=str))]
    lines = []
    for key, value in evidence.items():
        if isinstance(value, (dict, list)):
            text = json.dumps(value, ensure_ascii=False, default=str, sort_keys=True)
        elif value is None:
            text = "none"
        else:
            text = str(value)
        lines.append((str(key).replace("_", " "), text))
    return lines


@register.filter
def get_item(mapping, key):
    return mapping.get(key) if mapping else None


@register.filter
def elapsed(attempt):
    """How long an attempt took: "0.84 s", "12 s", "3 min"."""
    if not attempt.ended_at:
        return ""
    seconds = (attempt.ended_at - attempt.started_at).total_seconds()
    if seconds < 10:
        return f"{seconds:.2f} s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    return short_duration(attempt.ended_at - attempt.started_at)


@register.filter
def when(value, arg=""):
    """A moment as the console shows every moment: local time, 24-hour, with its zone
    ("1 Dec 2026, 14:05 GMT"). ``|when:"time"`` for the clock alone, ``|when:"seconds"`` with
    seconds (the journal)."""
    return timefmt.local(value, date=arg != "time", seconds=arg == "seconds")


@register.filter
def is_for(bound, action):
    """Whether a refused form (``bound``, see recovery.views.actions.refused) is this action's."""
    return bool(bound) and bound.get("action") == action


@register.filter
def references(value):
    """ "HO-1, HO-2" (a drill case's enquiries) -> [("HO-1", True), ("HO-2", True)]: each with
    whether it can be a link (a reference the enquiry URL can hold; anything else is shown as
    text rather than failing the page)."""
    parts = [part.strip() for part in str(value or "").split(",") if part.strip()]
    return [(part, bool(re.fullmatch(r"[\w-]{1,64}", part))) for part in parts]


@register.simple_tag
def mail_preview(enquiry, action, typed=""):
    """The e-mail ``action`` would send ``enquiry``'s resident with ``typed`` as the message to
    them (recovery.views.wording.preview): the form's preview before anything is typed, and
    again when a refused form comes back."""
    from recovery.views.wording import preview

    return preview(enquiry, action, typed or "")
