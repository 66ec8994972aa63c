from django.urls import path

from intake import views

app_name = "intake"
urlpatterns = [
    path("events/<slug:source>/", views.receive, name="receive"),
]
