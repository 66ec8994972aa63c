from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from django.views.generic import RedirectView

from config import views
from config.security import LoginForm
from ledger import inbound, residentpage
from ledger.webhooks import mailgun_tracking

urlpatterns = [
    path("", RedirectView.as_view(url="/console/", permanent=False)),
    path("healthz", views.healthz, name="healthz"),
    # Browsers ask for /favicon.ico whatever the page links; whitenoise serves the file.
    path("favicon.ico", views.favicon, name="favicon"),
    path(
        "accounts/login/",
        auth_views.LoginView.as_view(authentication_form=LoginForm),
        name="login",
    ),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("intake/", include("intake.urls")),
    # A mail provider's delivery reports (ledger.webhooks): 404 until configured.
    path("delivery/mailgun/", mailgun_tracking, name="delivery-mailgun"),
    # The resident's page (ledger.residentpage): a signed, expiring link, no login.
    path("r/<str:token>/", residentpage.page, name="resident-page"),
    path("r/<str:token>/new-link/", residentpage.new_link, name="resident-new-link"),
    # Replies by e-mail: Mailgun's inbound route (ledger.inbound), 404 until configured.
    path("inbound/mailgun/", inbound.mailgun_inbound, name="inbound-mailgun"),
    path("", include("recovery.urls")),
]
