from django.urls import path

from recovery import views

app_name = "recovery"
urlpatterns = [
    path("console/", views.queue, name="queue"),
]
