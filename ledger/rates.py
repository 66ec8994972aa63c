"""The rate an admin sets for an integration: one rule, read by the model, the forms and the
environment. The bottom layer (models.Integration.clean reads it); ledger.limits paces calls by
it.
"""

from __future__ import annotations

import math
import re

from django import forms
from django.core.exceptions import ValidationError

from ledger import messages

# --- the rate an admin sets ----------------------------------------------------------------------
# One rule wherever a rate is typed (the console's settings form, the Django admin, the
# environment variable <PREFIX>_MAX_REQUESTS_PER_SECOND) and wherever one is read: plain ASCII
# decimal ("25", "0.5"); 0 or empty means no limit; otherwise between RATE_MIN and RATE_MAX.
# 1e-300 would make one call's interval overflow every datetime (OverflowError in the worker);
# float() would also take "\u0663" (an Arabic-Indic three), "1_000", "1e3" and "inf".
RATE_MIN = 0.01  # one call every 100 seconds
RATE_MAX = 10_000.0
_RATE_TEXT = re.compile(r"[0-9]{1,5}(?:\.[0-9]{1,6})?")


def parse_rate(text) -> float | None:
    """The rate typed as ``text``: None for no limit (empty or 0). Raises ValueError with a
    message a person can act on."""
    text = "" if text is None else str(text).strip()
    if not text:
        return None
    if not _RATE_TEXT.fullmatch(text):
        raise ValueError(str(messages.RATE_NOT_A_NUMBER % {"value": text[:40]}))
    return checked_rate(float(text))


def checked_rate(rate) -> float | None:
    """A stored or typed number under the same rule: None for no limit, else the rate."""
    if rate is None or rate == 0:
        return None
    rate = float(rate)
    if not (math.isfinite(rate) and RATE_MIN <= rate <= RATE_MAX):
        raise ValueError(
            str(
                messages.RATE_OUT_OF_RANGE
                % {"value": f"{rate:g}", "min": RATE_MIN, "max": RATE_MAX}
            )
        )
    return rate


class RateFormField(forms.FloatField):
    """The rate on a form (the console's and the admin's): read as text under parse_rate's
    rule, never through float()."""

    def to_python(self, value):
        if value in self.empty_values:
            return None
        try:
            return parse_rate(value)
        except ValueError as exc:
            raise ValidationError(str(exc), code="invalid") from None

    def validate(self, value):
        if value is None and self.required:
            raise ValidationError(self.error_messages["required"], code="required")

    def run_validators(self, value):
        pass  # parse_rate is the rule (the model's MinValueValidator(0) says less)

    def widget_attrs(self, widget):
        attrs = super().widget_attrs(widget)
        attrs.update({"min": "0", "max": f"{RATE_MAX:g}", "step": "any"})
        return attrs
