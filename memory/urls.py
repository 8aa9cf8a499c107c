from django.urls import path

from . import views

urlpatterns = [
    path("", views.memory_panel, name="memory_panel"),
    path("add/", views.memory_add, name="memory_add"),
    path("<int:memory_pk>/", views.memory_update, name="memory_update"),
]
