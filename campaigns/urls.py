from django.urls import path

from . import cast_views, entity_views, note_views, rule_views, views, voice_views

urlpatterns = [
    path("", views.state_panel, name="state_panel"),
    path("correct/", views.state_correct, name="state_correct"),
    path("events/<int:node_pk>/", views.state_events, name="state_events"),
    path("view/", views.author_view, name="author_view"),
    path("mute/", views.mute, name="mute"),
    path("world/", views.world_panel, name="world_panel"),
    path("world/correct/", views.world_correct, name="world_correct"),
    path("world/map/", views.world_map, name="world_map"),
    path("world/items/", views.items_panel, name="items_panel"),
    path("world/things/", entity_views.entities, name="entities"),
    path("world/things/<str:kind>/new/", entity_views.entity_form, name="entity_new"),
    path("world/things/<str:kind>/<str:key>/", entity_views.entity_form, name="entity_edit"),
    path("time/", rule_views.time_panel, name="time_panel"),
    path("variables/", rule_views.variables_panel, name="variables_panel"),
    path("rolls/", rule_views.rolls_panel, name="rolls_panel"),
    path("triggers/", rule_views.triggers_panel, name="triggers_panel"),
    path("rules/forms/<str:kind>/", rule_views.rule_form, name="rule_form"),
    path("rules/forms/<str:kind>/save/", rule_views.rule_save, name="rule_save"),
    path("rules/<str:panel>/correct/", rule_views.rules_correct, name="rules_correct"),
    path("note/", note_views.note_panel, name="note_panel"),
    path("note/save/", note_views.note_save, name="note_save"),
    path("voices/", voice_views.voices_panel, name="voices_panel"),
    path("cast/", cast_views.cast_panel, name="cast_panel"),
    path("cast/<int:card_pk>/portrait/", cast_views.card_portrait, name="card_portrait"),
]
