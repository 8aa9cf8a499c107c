from django.urls import path

from . import views

urlpatterns = [
    path("", views.state_panel, name="state_panel"),
    path("correct/", views.state_correct, name="state_correct"),
    path("events/<int:node_pk>/", views.state_events, name="state_events"),
]
