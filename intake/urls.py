from django.urls import path

from intake import views

app_name = "intake"
urlpatterns = [
    path("events/<slug:source>/", views.receive, name="receive"),
    # Without the slash too: APPEND_SLASH would answer 301, and a client that follows a 301
    # sends a GET and loses the body.
    path("events/<slug:source>", views.receive),
]
