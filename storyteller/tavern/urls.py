from django.urls import path

from . import views

urlpatterns = [
    path("bring/", views.bring, name="bring"),
    path("campaigns/<int:pk>/tavern/export/", views.export_tavern, name="export_tavern"),
    path("campaigns/<int:pk>/tavern/read/", views.read_into_state, name="read_into_state"),
]
