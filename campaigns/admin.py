from django import forms
from django.contrib import admin, messages
from django.forms.fields import InvalidJSONInput

from . import state, uploads
from .models import (BeliefRecord, Branch, Campaign, CanonRule, ConsolidationRun, ContextSnapshot, EventRecord,
                     ExitRecord, ItemRecord, JudgeRun, Node, OffstageRun, PerceptionRecord, PlaceRecord, RecorderRun,
                     RollRecord, Round, SavePoint, StateEvent, StateRecord, TimeRecord, TriggerRecord, VariableRecord)
from .state.events import MAX_TEXT


class CanonRuleInline(admin.TabularInline):
    model = CanonRule
    extra = 1
    fields = ["text", "scope", "enabled", "position"]


@admin.register(Campaign)
class CampaignAdmin(admin.ModelAdmin):
    list_display = ["title", "owner", "genre", "turn_count", "head_branch", "head_depth", "narrator_model", "clock_mode",
                    "time_zone", "updated_at"]
    list_filter = ["genre", "owner", "point_of_view", "clock_mode"]
    search_fields = ["title", "protagonist", "opening"]
    inlines = [CanonRuleInline]
    readonly_fields = ["head_branch", "head_depth", "created_at", "updated_at", "last_played_at"]


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


@admin.register(Round)
class RoundAdmin(_ReadOnlyAdmin):
    list_display = ["node", "number", "kind", "started_ms", "elapsed_seconds"]
    list_filter = ["kind"]


@admin.register(ContextSnapshot)
class ContextSnapshotAdmin(_ReadOnlyAdmin):
    list_display = ["node", "model", "api", "prompt_eval_count", "eval_count", "done_reason", "duration_ms"]
    list_filter = ["api", "model", "done_reason"]


@admin.register(SavePoint)
class SavePointAdmin(admin.ModelAdmin):
    list_display = ["name", "campaign", "branch", "depth", "created_at"]
    list_filter = ["campaign"]
    search_fields = ["name"]


class BoundedJSONField(forms.JSONField):
    """JSON typed into the admin, read by the bounded reader imports use (deep nesting or a number of thousands
    of digits is refused in words, not a server error)."""

    def to_python(self, value):
        if self.disabled or value in self.empty_values or not isinstance(value, str):
            return super().to_python(value)
        if len(value.encode()) > uploads.FIELD.max_bytes:
            raise forms.ValidationError(f"At most {uploads.FIELD.max_bytes:,} bytes of JSON fit here.")
        try:
            return uploads.parse(value, uploads.FIELD, "The data")
        except uploads.UploadRefused as refusal:
            raise forms.ValidationError(str(refusal)) from None

    def bound_data(self, data, initial):
        """Show refused JSON back as it was typed, without reading it again unbounded."""
        if self.disabled or data is None:
            return super().bound_data(data, initial)
        try:
            return self.to_python(data)
        except forms.ValidationError:
            return InvalidJSONInput(data)


class CorrectionAdminForm(forms.ModelForm):
    """A correction made in the admin: the same typed event, validated, as the state panel's."""

    type = forms.ChoiceField(choices=[(name, name) for name in state.CORRECTION_TYPES])
    subject = forms.CharField(required=False, max_length=MAX_TEXT, help_text="Who or what the event is about.")
    object = forms.CharField(required=False, max_length=MAX_TEXT,
                             help_text="The place, item, other party, kind, replaced fact or slot, by type.")
    value = forms.CharField(required=False, max_length=MAX_TEXT, help_text="The fact, description or text.")
    aliases = forms.CharField(required=False, max_length=MAX_TEXT, help_text="For an entity: comma separated.")
    narrator_only = forms.BooleanField(required=False)
    data = BoundedJSONField(required=False, help_text='The fields of the event type (docs/events.md), e.g. '
                                                     '{"ignore_exits": true} or {"ops": [{"op": "take", "item": '
                                                     '"iron key"}]}.')

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
            return ["campaign", "type", "subject", "object", "value", "aliases", "narrator_only", "data"]
        return ["campaign", "node", "source", "author", "payload", "status", "reason", "previous", "attempt"]

    def save_model(self, request, obj, form, change):
        fields = {name: form.cleaned_data[name] for name in ("type", "subject", "object", "value", "aliases",
                                                             "narrator_only", "data")}
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


class _DataFilter(admin.SimpleListFilter):
    """Filter records by one value of their ``data`` (an exit's state, an item's container)."""

    key = ""
    values = ()

    def lookups(self, request, model_admin):
        return [(value, value) for value in self.values]

    def queryset(self, request, queryset):
        if self.value() is None:
            return queryset
        value = {"true": True, "false": False}.get(self.value(), self.value())
        return queryset.filter(**{f"data__{self.key}": value})


class ExitStateFilter(_DataFilter):
    title, parameter_name, key, values = "state", "state", "state", ("open", "locked", "blocked")


class ContainerFilter(_DataFilter):
    title, parameter_name, key, values = "container", "container", "container", ("open", "closed", "locked")


class HiddenFilter(_DataFilter):
    title, parameter_name, key, values = "hidden", "hidden", "hidden", ("true", "false")


class NotableFilter(_DataFilter):
    title, parameter_name, key, values = "notable", "notable", "notable", ("true", "false")


class _WorldRecordAdmin(_ReadOnlyAdmin):
    """World records as stored on every line (depth and branch say where); change them through corrections."""

    kind = ""
    search_fields = ["slot", "subject", "value"]

    def get_queryset(self, request):
        return super().get_queryset(request).filter(kind=self.kind).select_related("campaign")


@admin.register(PlaceRecord)
class PlaceRecordAdmin(_WorldRecordAdmin):
    kind = "entity"
    list_display = ["value", "subject", "description", "campaign", "branch", "depth", "authority", "retracted"]
    list_filter = ["campaign", "authority", "narrator_only", "retracted"]

    def get_queryset(self, request):
        return super().get_queryset(request).filter(data__kind="place")

    @admin.display(description="description")
    def description(self, obj):
        return obj.data.get("description", "")


@admin.register(ExitRecord)
class ExitRecordAdmin(_WorldRecordAdmin):
    kind = "exit"
    list_display = ["subject", "value", "label", "state", "opener", "travel_seconds", "hidden", "campaign", "branch",
                    "depth", "retracted"]
    list_filter = ["campaign", ExitStateFilter, HiddenFilter, "authority", "retracted"]

    @admin.display(description="label")
    def label(self, obj):
        return obj.data.get("label", "")

    @admin.display(description="state")
    def state(self, obj):
        return obj.data.get("state", "")

    @admin.display(description="opener")
    def opener(self, obj):
        return obj.data.get("opener", "")

    @admin.display(description="travel (s)")
    def travel_seconds(self, obj):
        return obj.data.get("travel_seconds", 0)

    @admin.display(description="hidden", boolean=True)
    def hidden(self, obj):
        return bool(obj.data.get("hidden"))


@admin.register(ItemRecord)
class ItemRecordAdmin(_WorldRecordAdmin):
    kind = "item"
    list_display = ["subject", "quantity", "container", "owner", "condition", "hidden", "notable", "campaign",
                    "branch", "depth", "retracted"]
    list_filter = ["campaign", ContainerFilter, HiddenFilter, NotableFilter, "authority", "retracted"]

    @admin.display(description="quantity")
    def quantity(self, obj):
        return obj.data.get("quantity", 1)

    @admin.display(description="container")
    def container(self, obj):
        return obj.data.get("container") or ""

    @admin.display(description="owner")
    def owner(self, obj):
        return obj.data.get("owner", "")

    @admin.display(description="condition")
    def condition(self, obj):
        return obj.data.get("condition", "")

    @admin.display(description="hidden", boolean=True)
    def hidden(self, obj):
        return bool(obj.data.get("hidden"))

    @admin.display(description="notable", boolean=True)
    def notable(self, obj):
        return bool(obj.data.get("notable"))


@admin.register(RecorderRun)
class RecorderRunAdmin(_ReadOnlyAdmin):
    list_display = ["node", "status", "attempts", "model", "error", "updated_at"]
    list_filter = ["status"]


@admin.register(OffstageRun)
class OffstageRunAdmin(_ReadOnlyAdmin):
    list_display = ["node", "status", "played", "waiting", "note", "error", "attempts", "updated_at"]
    list_filter = ["status"]


@admin.register(ConsolidationRun)
class ConsolidationRunAdmin(_ReadOnlyAdmin):
    list_display = ["node", "status", "note", "error", "attempts", "updated_at"]
    list_filter = ["status"]


class _RuleRecordAdmin(_ReadOnlyAdmin):
    """Story time and world rules as stored on every line (depth and branch say where); change them through the
    play page's panels or a correction."""

    kinds = ()
    list_display = ["slot", "kind", "subject", "value", "campaign", "branch", "depth", "authority", "narrator_only",
                    "retracted"]
    list_filter = ["kind", "campaign", "authority", "retracted"]
    search_fields = ["slot", "subject", "value"]

    def get_queryset(self, request):
        return super().get_queryset(request).filter(kind__in=self.kinds).select_related("campaign")


@admin.register(TimeRecord)
class TimeRecordAdmin(_RuleRecordAdmin):
    kinds = ("clock", "calendar", "routine", "agenda_cursor", "consolidation", "engagement", "intent", "catch_up")


@admin.register(VariableRecord)
class VariableRecordAdmin(_RuleRecordAdmin):
    kinds = ("variable_def", "var", "temperament")


@admin.register(RollRecord)
class RollRecordAdmin(_RuleRecordAdmin):
    kinds = ("dice_check", "roll")


@admin.register(TriggerRecord)
class TriggerRecordAdmin(_RuleRecordAdmin):
    kinds = ("trigger", "trigger_note", "judgment")


@admin.register(JudgeRun)
class JudgeRunAdmin(_ReadOnlyAdmin):
    list_display = ["node", "status", "model", "error", "updated_at"]
    list_filter = ["status"]


class _MindRecordAdmin(_WorldRecordAdmin):
    """What characters perceived and believe, as stored on every line; a person changes it by correction
    (the minds panel), and an event only ever by retracting it."""

    def _data(self, obj, name):
        value = obj.data.get(name, "")
        return ", ".join(value) if isinstance(value, list) else value


@admin.register(EventRecord)
class EventRecordAdmin(_MindRecordAdmin):
    kind = "event"
    list_display = ["slot", "value", "importance", "location", "participants", "campaign", "branch", "depth",
                    "narrator_only", "retracted"]
    list_filter = ["campaign", "narrator_only", "retracted"]

    @admin.display(description="importance")
    def importance(self, obj):
        return obj.data.get("importance", 1)

    @admin.display(description="location")
    def location(self, obj):
        return self._data(obj, "location")

    @admin.display(description="participants")
    def participants(self, obj):
        return self._data(obj, "participants")


@admin.register(PerceptionRecord)
class PerceptionRecordAdmin(_MindRecordAdmin):
    kind = "perception"
    list_display = ["subject", "slot", "value", "mode", "accuracy", "campaign", "branch", "depth", "retracted"]
    list_filter = ["campaign", "retracted"]

    @admin.display(description="mode")
    def mode(self, obj):
        return self._data(obj, "mode")

    @admin.display(description="accuracy (checking only)")
    def accuracy(self, obj):
        return self._data(obj, "accuracy")


@admin.register(BeliefRecord)
class BeliefRecordAdmin(_MindRecordAdmin):
    kind = "belief"
    list_display = ["subject", "slot", "value", "confidence", "supports", "contradicts", "campaign", "branch",
                    "depth", "retracted"]
    list_filter = ["campaign", "retracted"]

    @admin.display(description="confidence")
    def confidence(self, obj):
        return self._data(obj, "confidence")

    @admin.display(description="supports")
    def supports(self, obj):
        return self._data(obj, "supports")

    @admin.display(description="contradicts")
    def contradicts(self, obj):
        return self._data(obj, "contradicts")
