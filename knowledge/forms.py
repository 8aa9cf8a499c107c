from django import forms

from .models import Source


class UploadForm(forms.Form):
    classification = forms.ChoiceField(choices=Source.Classification.choices, initial=Source.Classification.REFERENCE)
    hidden = forms.BooleanField(required=False, label="Narrator only (the protagonist does not know this)")
    always_include = forms.BooleanField(required=False, label="Always include (Canon only)")
    allow_duplicate = forms.BooleanField(required=False, label="Import even if the same text is already here")
    lorebook = forms.BooleanField(required=False, label="Lorebook (each heading is an entry characters know only "
                                                        "once they have learned it)")
    lore_scope = forms.ChoiceField(choices=Source.LoreScope.choices, initial=Source.LoreScope.LISTED, required=False,
                                   label="Its entries are")

    def clean(self):
        data = super().clean()
        if data.get("always_include") and data.get("classification") != Source.Classification.CANON:
            self.add_error("always_include", "Only Canon can be always included.")
        data["lore_scope"] = data.get("lore_scope") or Source.LoreScope.LISTED
        return data


class SourceForm(forms.ModelForm):
    class Meta:
        model = Source
        fields = ["classification", "enabled", "hidden", "always_include", "notes", "lorebook", "lore_scope"]
        widgets = {"notes": forms.Textarea(attrs={"rows": 3})}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # A settings post without a scope (an older page) keeps the one the source has.
        self.fields["lore_scope"].required = False

    def clean_lore_scope(self):
        return self.cleaned_data["lore_scope"] or self.instance.lore_scope

    def clean(self):
        data = super().clean()
        if data.get("always_include") and data.get("classification") != Source.Classification.CANON:
            self.add_error("always_include", "Only Canon can be always included; reclassify it as Canon first.")
        return data
