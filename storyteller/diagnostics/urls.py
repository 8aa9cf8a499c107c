from django.urls import path

from . import views

urlpatterns = [
    path("", views.long_run_report, name="long_run_report"),
]
