from django import forms
from django.contrib import admin, messages

from . import state
from .models import Branch, Campaign, CanonRule, ContextSnapshot, Node, RecorderRun, SavePoint, StateEvent, StateRecord
from .state.events import MAX_TEXT


class CanonRuleInline(admin.TabularInline):
    model = CanonRule
    extra = 1
    fields = ["text", "scope", "enabled", "position"]


@admin.register(Campaign)
class CampaignAdmin(admin.ModelAdmin):
    list_display = ["title", "owner", "genre", "turn_count", "head_branch", "head_depth", "narrator_model", "updated_at"]
    list_filter = ["genre", "owner", "point_of_view"]
    search_fields = ["title", "protagonist", "opening"]
    inlines = [CanonRuleInline]
    readonly_fields = ["head_branch", "head_depth", "created_at", "updated_at"]


@admin.register(CanonRule)
class CanonRuleAdmin(admin.ModelAdmin):
    list_display = ["text", "campaign", "scope", "enabled", "position", "updated_at"]
    list_filter = ["enabled", "scope", "campaign"]
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


class CorrectionAdminForm(forms.ModelForm):
    """A correction made in the admin: the same typed event, validated, as the state panel's."""

    type = forms.ChoiceField(choices=[(name, name) for name in state.CORRECTION_TYPES])
    subject = forms.CharField(required=False, max_length=MAX_TEXT, help_text="Who or what the event is about.")
    object = forms.CharField(required=False, max_length=MAX_TEXT,
                             help_text="The place, item, other party, kind, replaced fact or slot, by type.")
    value = forms.CharField(required=False, max_length=MAX_TEXT, help_text="The fact, description or text.")
    aliases = forms.CharField(required=False, max_length=MAX_TEXT, help_text="For an entity: comma separated.")
    narrator_only = forms.BooleanField(required=False)

    class Meta:
        model = StateEvent
        fields = ["campaign"]


@admin.register(StateEvent)
class StateEventAdmin(admin.ModelAdmin):
    """Every proposed state change; adding one here is a manual correction at the campaign's head."""

    list_display = ["id", "campaign", "node", "source", "author", "event_type", "status", "reason", "created_at"]
    list_filter = ["status", "source", "campaign"]
    search_fields = ["reason", "payload"]

    @admin.display(description="type")
    def event_type(self, obj):
        return obj.payload.get("type")

    def get_form(self, request, obj=None, **kwargs):
        if obj is None:
            kwargs["form"] = CorrectionAdminForm
        return super().get_form(request, obj, **kwargs)

    def get_fields(self, request, obj=None):
        if obj is None:
            return ["campaign", "type", "subject", "object", "value", "aliases", "narrator_only"]
        return ["campaign", "node", "source", "author", "payload", "status", "reason", "previous", "attempt"]

    def save_model(self, request, obj, form, change):
        fields = {name: form.cleaned_data[name] for name in ("type", "subject", "object", "value", "aliases",
                                                             "narrator_only")}
        event = state.correct(form.cleaned_data["campaign"], request.user, fields)
        obj.pk, obj.node_id, obj.payload, obj.status = event.pk, event.node_id, event.payload, event.status
        if event.status == StateEvent.Status.REJECTED:
            messages.error(request, f"The correction was rejected: {event.reason}.")

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(StateRecord)
class StateRecordAdmin(_ReadOnlyAdmin):
    """State values as stored; retract or change visibility through corrections, never by editing rows."""

    list_display = ["slot", "kind", "value", "campaign", "branch", "depth", "authority", "narrator_only", "retracted"]
    list_filter = ["kind", "authority", "narrator_only", "retracted", "campaign"]
    search_fields = ["slot", "value"]
    actions = ["retract", "make_narrator_only", "make_player_known"]

    def _correct(self, request, records, payload):
        for record in records:
            event = state.correct(record.campaign, request.user, payload(record))
            level = messages.SUCCESS if event.status == StateEvent.Status.APPLIED else messages.ERROR
            self.message_user(request, f"{record.slot}: {event.status}{': ' + event.reason if event.reason else ''}",
                              level)

    @admin.action(description="Retract at the campaign's head (a correction)")
    def retract(self, request, queryset):
        self._correct(request, queryset, lambda r: {"type": "retract", "object": r.slot})

    @admin.action(description="Make narrator-only at the campaign's head (a correction)")
    def make_narrator_only(self, request, queryset):
        self._correct(request, queryset, lambda r: {"type": "mark", "object": r.slot, "narrator_only": True})

    @admin.action(description="Make player-known at the campaign's head (a correction)")
    def make_player_known(self, request, queryset):
        self._correct(request, queryset, lambda r: {"type": "mark", "object": r.slot, "narrator_only": False})


@admin.register(RecorderRun)
class RecorderRunAdmin(_ReadOnlyAdmin):
    list_display = ["node", "status", "attempts", "model", "error", "updated_at"]
    list_filter = ["status"]
