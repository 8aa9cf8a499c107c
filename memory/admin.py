from django.contrib import admin

from . import bank
from .models import Checkpoint, Memory, MemoryRun, MindsRun, RecallItem


@admin.register(Memory)
class MemoryAdmin(admin.ModelAdmin):
    list_display = ["id", "text", "campaign", "source_start", "source_end", "authority", "pinned", "use_count",
                    "forgotten", "enabled", "origin"]
    list_filter = ["authority", "pinned", "forgotten", "enabled", "origin", "campaign"]
    search_fields = ["text", "original_text"]
    fields = ["campaign", "text", "original_text", "authority", "pinned", "forgotten", "enabled", "branch", "depth",
              "source_start", "source_end", "origin", "model", "use_count", "last_used_at", "created_at", "vector"]
    # Where a memory came from and what made its vector are provenance, not something to edit.
    readonly_fields = ["campaign", "original_text", "branch", "depth", "source_start", "source_end", "origin",
                       "model", "use_count", "last_used_at", "created_at", "vector"]
    actions = ["pin", "forget", "restore", "downgrade"]

    def has_add_permission(self, request):
        return False  # a memory needs an anchor: add one on the play page, at the current position

    def save_model(self, request, obj, form, change):
        if "authority" in form.changed_data and obj.authority != Memory.Authority.HEURISTIC:
            obj.authority = form.initial["authority"]  # only ever downgraded, never promoted
        if change and "text" in form.changed_data:
            corrected, obj.text = obj.text, form.initial["text"]
            bank.edit_text(obj, corrected)  # keeps the original, drops the stale vector, saves the rest
            return
        super().save_model(request, obj, form, change)

    @admin.action(description="Pin (always retrieved, never evicted)")
    def pin(self, request, queryset):
        queryset.update(pinned=True)

    @admin.action(description="Forget (kept, never retrieved)")
    def forget(self, request, queryset):
        queryset.update(forgotten=True)

    @admin.action(description="Restore forgotten memories")
    def restore(self, request, queryset):
        queryset.update(forgotten=False)

    @admin.action(description="Downgrade to heuristic ([inferred])")
    def downgrade(self, request, queryset):
        queryset.update(authority=Memory.Authority.HEURISTIC)


@admin.register(MemoryRun)
class MemoryRunAdmin(admin.ModelAdmin):
    list_display = ["node", "campaign", "status", "written", "evicted", "embedded", "attempts", "updated_at"]
    list_filter = ["status", "campaign"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(Checkpoint)
class CheckpointAdmin(admin.ModelAdmin):
    """Checkpoints are a cache: listed, inspected and deletable (the next turn that needs one rebuilds it),
    never edited here — a summary's text is bound to its hash; the Plot panel writes a corrected one."""

    list_display = ["id", "campaign", "branch", "depth", "source_start", "source_end", "origin", "model", "tokens",
                    "created_at"]
    list_filter = ["origin", "campaign"]
    search_fields = ["text"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(MindsRun)
class MindsRunAdmin(admin.ModelAdmin):
    list_display = ["node", "campaign", "status", "applied", "rejected", "asked_again", "indexed", "embedded",
                    "attempts", "model", "updated_at"]
    list_filter = ["status", "campaign"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(RecallItem)
class RecallItemAdmin(admin.ModelAdmin):
    """The recall index: derived from the records (rebuilt from the minds panel), listed to inspect, never edited."""

    list_display = ["slot", "owner", "kind", "text", "importance", "at_ms", "campaign", "branch", "depth", "retracted"]
    list_filter = ["kind", "campaign", "retracted"]
    search_fields = ["slot", "owner", "text", "gist"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
