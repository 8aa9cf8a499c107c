from django import forms

from . import kept, worldfile
from .models import PORTRAIT_BYTES, AuthorNote, Campaign, CanonRule, Node, Persona
from .state import CORRECTION_TYPES
from .state.events import MAX_TEXT
from .state.registry import OP_FIELDS, TYPES
from .state.time import calendar, clock
from .state.time.rules import Refused


# The campaign's limits on voices (seed 002; the edit page's "Voices" fieldset).
VOICES_FIELDS = ["game_master", "round_timer_seconds", "max_rounds", "max_characters", "offstage_per_turn", "offstage_per_character",
                 "offstage_summary", "authoring_enabled", "authoring_per_turn", "authoring_consolidate_after"]
VOICES_NUMBERS = [name for name in VOICES_FIELDS if name not in ("game_master", "offstage_summary",
                                                                  "authoring_enabled")]


class CampaignForm(forms.ModelForm):
    reranker_url = forms.URLField(required=False, max_length=300, assume_scheme="http", label="Reranker URL",
                                  help_text=Campaign._meta.get_field("reranker_url").help_text)

    class Meta:
        model = Campaign
        fields = [
            "title", "genre", "protagonist", "persona", "opening",
            "point_of_view", "prose_length", "dialogue_density", "descriptive_richness", "violence_level",
            "pacing", "style_notes", "narrator_rules", "reply_direction", "style_examples",
            "context_token_budget", "max_output_tokens", "temperature",
            *VOICES_FIELDS,
            "memory_recall", "memory_over_retrieve", "memory_diversity", "memory_associate", "memory_flaky",
            "memory_verify", "reranker_url",
        ]
        widgets = {
            "opening": forms.Textarea(attrs={"rows": 6}),
            "protagonist": forms.TextInput(),
            "style_notes": forms.Textarea(attrs={"rows": 2}),
            "narrator_rules": forms.Textarea(attrs={"rows": 3}),
            "reply_direction": forms.Textarea(attrs={"rows": 2}),
            "style_examples": forms.Textarea(attrs={"rows": 4}),
        }

    # The form's sections, in order: (id, title, what it is for, its fields). Only the story needs filling in;
    # every other field has a default a story plays with.
    SECTIONS = (
        ("story", "The story", "Who the player is and where it begins. The only part a new campaign needs.",
         ("title", "genre", "protagonist", "persona", "opening", "world")),
        ("narrator", "Narrator and model", "How the story reads. The defaults read well; change them to taste.",
         ("point_of_view", "prose_length", "dialogue_density", "descriptive_richness", "violence_level", "pacing",
          "style_notes", "narrator_rules", "reply_direction", "style_examples")),
        ("memory", "Memory and budget", "How much the narrator reads and writes at once, how freely, and what "
         "characters remember. The budget starts at what the narrator model can read.",
         ("context_token_budget", "max_output_tokens", "temperature", "memory_flaky", "memory_recall", "memory_over_retrieve",
          "memory_diversity", "memory_associate")),
        ("voices", "Voices", "A game master, characters who speak for themselves, off-stage actions and the world "
         "author. Off by default: one narrator tells the story.", tuple(VOICES_FIELDS)),
        ("advanced", "Advanced", "Story time, triggers' pacing, checking the recorder and an optional reranker.",
         ("clock_mode", "time_zone", "round_seconds", "max_skip_days", "trigger_cap", "beat_turns", "cue_turns",
          "memory_verify", "reranker_url")),
    )

    def sections(self):
        """Return the form's sections for the page: each with its bound fields and whether one has an error (then
        it is shown open)."""
        shown = []
        for ident, title, text, names in self.SECTIONS:
            fields = [self[name] for name in names if name in self.fields]
            if fields:
                shown.append({"id": ident, "title": title, "text": text, "fields": fields,
                              "errors": any(field.errors for field in fields)})
        return shown

    def _left_out_keeps(self):
        """Return the fields outside the story section a post may leave out, keeping the campaign's value (the
        default when new): a script, an older page or a person who never opened the section."""
        names = [name for _, _, _, fields in self.SECTIONS[1:] for name in fields if name in self.fields]
        return [name for name in names if not isinstance(self.fields[name], forms.BooleanField)
                and not Campaign._meta.get_field(name).blank]

    def __init__(self, *args, window=None, model="", owner=None, **kwargs):
        """`window`: what the narrator `model` can read at once, if its server says; a new budget starts there.
        `owner`: whose personas a new campaign may play as (an existing one's owner otherwise)."""
        super().__init__(*args, **kwargs)
        owner = owner or (self.instance.owner if self.instance.owner_id else None)
        self.owner = owner
        self.fields["persona"].queryset = Persona.objects.filter(owner=owner) if owner else Persona.objects.none()
        self.fields["persona"].empty_label = "(nobody in particular: the protagonist above)"
        for name in self._left_out_keeps():
            self.fields[name].required = False
        field = self.fields["context_token_budget"]
        if window and not self.instance.pk:
            self.initial["context_token_budget"] = min(window, self.initial.get("context_token_budget", field.initial))
        if window:
            field.help_text += f" The narrator model, {model}, reads at most {window} tokens at once."
        elif model:
            field.help_text += (f" The server does not say how much the narrator model, {model}, reads at once: "
                                "keep the budget within what it was started with.")
        # A limit left out of a post (an older page, a script) keeps its value rather than failing the form,
        # and one out of range or not a number is refused in the model's words (what it is for, what it may be).
        for name in VOICES_NUMBERS:
            field = self.fields[name]
            message = Campaign._meta.get_field(name).validators[0].message
            field.error_messages.update(min_value=message, max_value=message, invalid=message)

    def clean_reranker_url(self):
        url = self.cleaned_data.get("reranker_url", "")
        if url and not url.startswith(("http://", "https://")):
            raise forms.ValidationError("Give the reranking server's address as http://host:port (or leave it empty).")
        return url

    def clean_context_token_budget(self):
        value = self.cleaned_data["context_token_budget"]
        if value is not None and value < 512:
            raise forms.ValidationError("A context budget under 512 tokens cannot hold the narrator rules and a reply.")
        return value

    def clean(self):
        cleaned = super().clean()
        for name in self._left_out_keeps():
            if cleaned.get(name) in (None, "") and name not in self.errors:
                cleaned[name] = self.initial.get(name, getattr(self.instance, name))
        budget, output = cleaned.get("context_token_budget"), cleaned.get("max_output_tokens")
        if budget and output and output + 64 >= budget // 2:
            self.add_error(
                "max_output_tokens",
                f"The reply reserve ({output} + 64) must stay under half of the context budget ({budget}), "
                "or there is no room left for the story.",
            )
        return cleaned


class NewCampaignForm(CampaignForm):
    """A new campaign, optionally started from a world file (docs/world-files.md).

    With a world file, what the form leaves blank of the title, protagonist
    and opening comes from the file's ``campaign`` section. A chosen file is
    kept between tries (``campaigns.kept``): a browser empties a file input
    each time the page is drawn again, and the person should not have to
    choose it again to fix a title or to read its problems.
    """

    # With a file the title, protagonist and opening may be left blank: the server says what is missing.
    use_required_attribute = False
    world = forms.FileField(required=False, label="World file (optional)",
                            help_text="A world file (.json or .zip): places, exits, characters and items the story "
                                      "starts with. It is checked whole; a file with any problem is refused, saying "
                                      "every one, and nothing is made.")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.world_problems = []
        self.kept_name = self.kept_token = ""
        self._chosen = None  # (name, bytes) of the world file of this try, chosen now or kept from the last
        if self.owner is not None and self.files.get("world") and self.data.get("world_kept"):
            kept.forget(self.owner, self.data["world_kept"])  # a new choice replaces the kept one
        elif self.owner is not None and self.data.get("world_kept"):
            found = kept.find(self.owner, self.data["world_kept"])
            if found:
                self._chosen, self.kept_token, self.kept_name = found, self.data["world_kept"], found[0]
        if self.files.get("world") or self._chosen:
            for name in ("title", "protagonist", "opening"):
                self.fields[name].required = False

    def clean_world(self):
        upload = self.cleaned_data.get("world")
        if upload is not None:
            if upload.size > worldfile.MAX_BYTES:
                raise forms.ValidationError(f"The file is {upload.size:,} bytes; a world file may be at most "
                                            f"{worldfile.MAX_BYTES:,}.")
            self._chosen = (upload.name, upload.read())
        if self._chosen is None:
            return None
        try:
            return worldfile.read(self._chosen[1])
        except worldfile.WorldRefused as refusal:
            self.refuse_world(refusal, add=False)
            raise forms.ValidationError(self._refused(refusal)) from None

    def refuse_world(self, refusal, add=True):
        """Show the world file's problems one per line, each with what follows from it folded under it."""
        self.world_problems = refusal.problems
        if add:
            self.add_error("world", self._refused(refusal))

    @staticmethod
    def _refused(refusal):
        count = len(refusal.problems)
        return (f"The world file has {count} problem{'s' if count != 1 else ''}, listed below; nothing was made. "
                "Fix the file and choose it again.")

    def keep_world(self):
        """Keep the chosen world file for the next try of the form (the page is drawn again without it)."""
        if self._chosen is not None and not self.kept_token and self.owner is not None:
            self.kept_token = kept.keep(self.owner, self._chosen[0], self._chosen[1])
            self.kept_name = self._chosen[0]

    def forget_world(self):
        if self.kept_token:
            kept.forget(self.owner, self.kept_token)


# Story time and world rules (docs/rules.md). A new campaign takes them from its world file's ``clock``
# section (or their defaults); the edit form changes them.
TIME_FIELDS = ["clock_mode", "time_zone", "round_seconds", "max_skip_days", "trigger_cap", "beat_turns", "cue_turns"]


class EditCampaignForm(CampaignForm):
    class Meta(CampaignForm.Meta):
        # The opening is the root of the story tree; changing it would rewrite history.
        fields = [f for f in CampaignForm.Meta.fields if f != "opening"] + TIME_FIELDS
        widgets = {**CampaignForm.Meta.widgets, "time_zone": forms.TextInput(attrs={"list": "time-zones"})}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # A form posted without the story time section (an older page, a script) keeps the campaign's settings.
        for name in TIME_FIELDS:
            self.fields[name].required = False

    def _kept(self, name):
        value = self.cleaned_data.get(name)
        return getattr(self.instance, name) if value in (None, "") else value

    def clean_clock_mode(self):
        return self._kept("clock_mode")

    def clean_trigger_cap(self):
        return self._kept("trigger_cap")

    def clean_beat_turns(self):
        return self._kept("beat_turns")

    def clean_cue_turns(self):
        return self._kept("cue_turns")

    def clean_time_zone(self):
        value = self._kept("time_zone").strip()
        try:
            calendar.zone(value)
        except Refused:
            raise forms.ValidationError(f"{value!r} is not a time zone this machine knows; write an IANA name such "
                                        "as Europe/Lisbon, America/New_York or UTC.") from None
        return value

    def clean_round_seconds(self):
        value = self._kept("round_seconds")
        if not 1 <= value <= clock.MAX_ROUND_SECONDS:
            raise forms.ValidationError(f"A turn lasts 1 to {clock.MAX_ROUND_SECONDS:,} seconds of story time (a "
                                        "day); for longer, skip time between turns.")
        return value

    def clean_max_skip_days(self):
        value = self._kept("max_skip_days")
        if not 1 <= value <= 365:
            raise forms.ValidationError("One skip may be 1 to 365 days long; choose a number in that range.")
        return value


class CanonRuleForm(forms.ModelForm):
    class Meta:
        model = CanonRule
        fields = ["text", "scope", "enabled", "position"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # A rule is always true unless someone says it only describes the start.
        self.fields["scope"].required = False

    def clean_scope(self):
        return self.cleaned_data["scope"] or CanonRule.Scope.INVARIANT


CanonRuleFormSet = forms.inlineformset_factory(
    Campaign,
    CanonRule,
    form=CanonRuleForm,
    fields=["text", "scope", "enabled", "position"],
    extra=2,
    # Rules are disabled rather than deleted, so what earlier prompts relied on stays explainable.
    can_delete=False,
    widgets={"text": forms.Textarea(attrs={"rows": 2})},
)


# What one action and its direction may hold. The play page counts towards
# them as the player types and refuses (never cuts) what is longer.
MAX_ACTION = 4000
MAX_DIRECTION = 1000


class ActionForm(forms.Form):
    """One player action from the play page; text over its limit or not valid Unicode is refused, never cut."""

    mode = forms.ChoiceField(choices=Node.Mode.choices)
    text = forms.CharField(required=False, strip=True)
    direction = forms.CharField(required=False, strip=True)

    def clean_text(self):
        return _checked(self.cleaned_data["text"], "Your action", MAX_ACTION)

    def clean_direction(self):
        return _checked(self.cleaned_data["direction"], "The direction", MAX_DIRECTION)

    def clean(self):
        cleaned = super().clean()
        # Only a really empty action is "missing": text refused for its length or its characters says so itself.
        if cleaned.get("mode") not in (None, "continue") and "text" not in self.errors and not cleaned.get("text"):
            raise forms.ValidationError("Write what you do or say, or choose Continue.")
        return cleaned


def _checked(text, name, limit):
    """Return ``text``, or refuse it in words when it is too long or holds something that is not Unicode text."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise forms.ValidationError(
            f"{name} holds a broken character at position {error.start + 1:,} (half of a surrogate pair, often left "
            "by copying part of an emoji), so it is not valid Unicode text. Delete or retype that character and "
            "send again; nothing was sent."
        ) from error
    if len(text) > limit:
        raise forms.ValidationError(
            f"{name} is {len(text):,} characters long; the limit is {limit:,}. Shorten it by {len(text) - limit:,} "
            "and send again; nothing was sent."
        )
    return text


class SavePointForm(forms.Form):
    name = forms.CharField(max_length=100, strip=True)


class CorrectionForm(forms.Form):
    """One correction of the story state; what it means is checked by the event pipeline, not here.

    The fields of the event's ``data`` are posted under their own names (a
    form for ``move`` posts ``ignore_exits``; one for ``item_changes`` posts
    one operation as ``op``, ``item``, ``quantity``, ``to``…): ``payload``
    gathers those the event type has, and the pipeline reads and checks them.
    """

    type = forms.ChoiceField(choices=[(name, name) for name in CORRECTION_TYPES])
    subject = forms.CharField(required=False, max_length=MAX_TEXT, strip=True)
    object = forms.CharField(required=False, max_length=MAX_TEXT, strip=True)
    value = forms.CharField(required=False, max_length=MAX_TEXT, strip=True)
    aliases = forms.CharField(required=False, max_length=MAX_TEXT, strip=True)
    narrator_only = forms.BooleanField(required=False)

    def payload(self, posted):
        """Return the correction event: the cleaned fields, and ``data`` from what ``posted`` gives of the type's."""
        event = dict(self.cleaned_data)
        data = {}
        for name in TYPES[event["type"]].fields:
            if name == "ops":
                op = {field: posted[field].strip() for field in OP_FIELDS if posted.get(field, "").strip()}
                if op:
                    data["ops"] = [op]
            elif posted.get(name, "").strip():
                data[name] = posted[name].strip()
                if TYPES[event["type"]].fields[name].kind == "names":  # a list, typed as "Mara, Edrin"
                    data[name] = [part.strip() for part in data[name].split(",") if part.strip()]
        return {**event, "data": data}


class AuthorNoteForm(forms.ModelForm):
    """The author's note of the campaign, or of the branch the story is on (``branch_only``)."""

    branch_only = forms.BooleanField(required=False, label="Only on this branch of the story")

    class Meta:
        model = AuthorNote
        fields = ["text", "depth", "interval", "role"]
        labels = {"text": "Author's note", "depth": "How far from the end", "interval": "How often",
                  "role": "Read as"}
        widgets = {"text": forms.Textarea(attrs={"rows": 3, "placeholder": "e.g. Keep the mood tense; Mara is "
                                                                            "hiding something."})}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for name in ("depth", "interval"):
            message = AuthorNote._meta.get_field(name).validators[0].message
            self.fields[name].error_messages.update(min_value=message, max_value=message, invalid=message)

    def clean(self):
        cleaned = super().clean()
        if cleaned.get("depth") == 0 and cleaned.get("role") == AuthorNote.Role.ASSISTANT:
            self.add_error("depth", "A note in the narrator's own voice after your action would be read as the start "
                                    "of its reply: set how far from the end to 1 or more, or choose another voice.")
        return cleaned


# What a portrait may be: its first bytes name the format (a browser's file type can be anything). Never SVG: it
# can carry script.
PORTRAIT_SIGNATURES = {b"\x89PNG\r\n\x1a\n": "image/png", b"\xff\xd8\xff": "image/jpeg", b"GIF87a": "image/gif",
                       b"GIF89a": "image/gif"}


class PersonaForm(forms.ModelForm):
    """A persona: its name, description and, optionally, a portrait (a small PNG, JPEG, WebP or GIF)."""

    portrait_file = forms.FileField(required=False, label="Portrait (optional)",
                                    help_text=f"A PNG, JPEG, WebP or GIF of at most {PORTRAIT_BYTES // 1024} KB.")
    remove_portrait = forms.BooleanField(required=False, label="Remove the portrait")

    class Meta:
        model = Persona
        fields = ["name", "description"]
        widgets = {"description": forms.Textarea(attrs={"rows": 4})}

    def clean_portrait_file(self):
        upload = self.cleaned_data.get("portrait_file")
        if upload is None:
            return None
        if upload.size > PORTRAIT_BYTES:
            raise forms.ValidationError(f"The picture is {upload.size // 1024:,} KB; a portrait may be at most "
                                        f"{PORTRAIT_BYTES // 1024} KB. Choose a smaller one; nothing was saved.")
        data = upload.read()
        kind = portrait_type(data)
        if kind is None:
            raise forms.ValidationError("That file is not a PNG, JPEG, WebP or GIF picture; choose one of those. "
                                        "Nothing was saved.")
        return data, kind

    def save(self, commit=True):
        persona = super().save(commit=False)
        if self.cleaned_data.get("remove_portrait"):
            persona.portrait, persona.portrait_type = b"", ""
        elif self.cleaned_data.get("portrait_file"):
            persona.portrait, persona.portrait_type = self.cleaned_data["portrait_file"]
        if commit:
            persona.save()
        return persona


def portrait_type(data):
    """Return the picture type ``data`` begins as, or None when it is not a picture a portrait may be."""
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return next((kind for signature, kind in PORTRAIT_SIGNATURES.items() if data.startswith(signature)), None)
