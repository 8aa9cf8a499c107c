from django.urls import path

from . import views

urlpatterns = [
    path("", views.state_panel, name="state_panel"),
    path("correct/", views.state_correct, name="state_correct"),
    path("events/<int:node_pk>/", views.state_events, name="state_events"),
    path("world/", views.world_panel, name="world_panel"),
    path("world/correct/", views.world_correct, name="world_correct"),
    path("world/map/", views.world_map, name="world_map"),
    path("world/items/", views.items_panel, name="items_panel"),
]
