from django.urls import path

from . import views

urlpatterns = [
    path("", views.knowledge_page, name="knowledge"),
    path("panel/", views.knowledge_panel, name="knowledge_panel"),
    path("upload/", views.upload, name="knowledge_upload"),
    path("search/", views.search, name="knowledge_search"),
    path("rebuild/", views.rebuild, name="knowledge_rebuild"),
    path("sources/<int:source_pk>/", views.source_page, name="knowledge_source"),
    path("sources/<int:source_pk>/update/", views.source_update, name="knowledge_source_update"),
    path("sources/<int:source_pk>/delete/", views.source_delete, name="knowledge_source_delete"),
]
