"""Template context for every console page."""

from django.utils.functional import SimpleLazyObject

from recovery.permissions import CONFIGURE_PERMISSION


def readiness(request):
    """``readiness``: what the install still lacks (recovery.readiness), for admins only, read
    only when a page shows it (the banner in base.html)."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated or not user.has_perm(CONFIGURE_PERMISSION):
        return {}
    from recovery.readiness import findings

    return {"readiness": SimpleLazyObject(findings)}
