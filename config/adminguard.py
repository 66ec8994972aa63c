"""The Django admin is for staff. A signed-in person without staff status who follows a link to
it gets a plain 403 page that says so, not the admin's log-in form (which invites them to log in
again as someone else and says nothing about why)."""

from django.shortcuts import render

ADMIN_PREFIX = "/admin/"


class AdminNotForRoleMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        user = getattr(request, "user", None)
        if (
            request.path.startswith(ADMIN_PREFIX)
            and user is not None
            and user.is_authenticated
            and not (user.is_active and user.is_staff)
        ):
            message = (
                "The admin site is not for your role: it is for staff. Everything your role "
                "does is in the console."
            )
            return render(request, "recovery/forbidden.html", {"message": message}, status=403)
        return self.get_response(request)
