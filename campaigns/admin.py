from django.contrib import admin

from .models import Branch, Campaign, CanonRule, ContextSnapshot, Node, SavePoint


class CanonRuleInline(admin.TabularInline):
    model = CanonRule
    extra = 1
    fields = ["text", "enabled", "position"]


@admin.register(Campaign)
class CampaignAdmin(admin.ModelAdmin):
    list_display = ["title", "owner", "genre", "turn_count", "head_branch", "head_depth", "narrator_model", "updated_at"]
    list_filter = ["genre", "owner", "point_of_view"]
    search_fields = ["title", "protagonist", "opening"]
    inlines = [CanonRuleInline]
    readonly_fields = ["head_branch", "head_depth", "created_at", "updated_at"]


@admin.register(CanonRule)
class CanonRuleAdmin(admin.ModelAdmin):
    list_display = ["text", "campaign", "enabled", "position", "updated_at"]
    list_filter = ["enabled", "campaign"]
    list_editable = ["enabled", "position"]
    search_fields = ["text"]


@admin.register(Branch)
class BranchAdmin(admin.ModelAdmin):
    list_display = ["id", "campaign", "parent", "fork_depth", "created_at"]
    list_filter = ["campaign"]


# The story itself is append-only: the admin shows it but does not rewrite it.
class _ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(Node)
class NodeAdmin(_ReadOnlyAdmin):
    list_display = ["id", "campaign", "branch", "depth", "role", "mode", "tokens", "created_at"]
    list_filter = ["role", "mode", "campaign"]
    search_fields = ["text"]


@admin.register(ContextSnapshot)
class ContextSnapshotAdmin(_ReadOnlyAdmin):
    list_display = ["node", "model", "api", "prompt_eval_count", "eval_count", "done_reason", "duration_ms"]
    list_filter = ["api", "model", "done_reason"]


@admin.register(SavePoint)
class SavePointAdmin(admin.ModelAdmin):
    list_display = ["name", "campaign", "branch", "depth", "created_at"]
    list_filter = ["campaign"]
    search_fields = ["name"]
