from django.contrib import admin
from django.urls import include, path

from . import views

urlpatterns = [
    path("", views.campaign_list, name="campaign_list"),
    path("favicon.ico", views.favicon, name="favicon"),
    path("login/", views.login_page, name="login"),
    path("login/<str:uidb64>/<str:token>/", views.login_with_link, name="login_link"),
    path("logout/", views.logout_view, name="logout"),
    path("campaigns/new/", views.campaign_create, name="campaign_create"),
    path("campaigns/import/", views.import_campaign, name="import_campaign"),
    path("campaigns/<int:pk>/export/", views.export_campaign, name="export_campaign"),
    path("campaigns/<int:pk>/", views.play, name="play"),
    path("campaigns/<int:pk>/edit/", views.campaign_edit, name="campaign_edit"),
    path("campaigns/<int:pk>/undo/", views.undo, name="undo"),
    path("campaigns/<int:pk>/redo/", views.redo, name="redo"),
    path("campaigns/<int:pk>/save-point/", views.save_point, name="save_point"),
    path("campaigns/<int:pk>/branches/", views.branches, name="branches"),
    path("campaigns/<int:pk>/branches/<int:branch_pk>/switch/", views.switch_branch, name="switch_branch"),
    path(
        "campaigns/<int:pk>/save-points/<int:save_point_pk>/restore/",
        views.restore_save_point,
        name="restore_save_point",
    ),
    path("campaigns/<int:pk>/replies/<int:node_pk>/inspect/", views.inspector, name="inspector"),
    path("campaigns/<int:pk>/replies/<int:node_pk>/show/", views.show_version, name="show_version"),
    path("campaigns/<int:pk>/model/", views.choose_model, name="choose_model"),
    path("campaigns/<int:pk>/knowledge/", include("knowledge.urls")),
    path("campaigns/<int:pk>/state/", include("campaigns.urls")),
    path("campaigns/<int:pk>/memory/", include("memory.urls")),
    path("campaigns/<int:pk>/long-run/", include("storyteller.diagnostics.urls")),
    path("campaigns/<int:pk>/memory/rebuild/", views.rebuild_memory_vectors, name="memory_rebuild"),
    path("campaigns/<int:pk>/memory/plot/", views.plot_panel, name="plot_panel"),
    path("campaigns/<int:pk>/memory/plot/edit/", views.edit_plot, name="plot_edit"),
    path("campaigns/<int:pk>/memory/plot/rebuild/", views.rebuild_plot, name="plot_rebuild"),
    path("campaigns/<int:pk>/replies/<int:node_pk>/record/", views.retry_recording, name="retry_recording"),
    path("campaigns/<int:pk>/worker/", views.worker_status, name="worker_status"),
    path("campaigns/<int:pk>/worker/retry/", views.retry_worker, name="retry_worker"),
    path("settings/models/", views.model_settings, name="model_settings"),
    path("settings/models/test/", views.test_connection, name="test_connection"),
    path("admin/", admin.site.urls),
]
