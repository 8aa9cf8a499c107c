from django import forms

from .models import Source


class UploadForm(forms.Form):
    classification = forms.ChoiceField(choices=Source.Classification.choices, initial=Source.Classification.REFERENCE)
    hidden = forms.BooleanField(required=False, label="Narrator only (the protagonist does not know this)")
    always_include = forms.BooleanField(required=False, label="Always include (Canon only)")
    allow_duplicate = forms.BooleanField(required=False, label="Import even if the same text is already here")

    def clean(self):
        data = super().clean()
        if data.get("always_include") and data.get("classification") != Source.Classification.CANON:
            self.add_error("always_include", "Only Canon can be always included.")
        return data


class SourceForm(forms.ModelForm):
    class Meta:
        model = Source
        fields = ["classification", "enabled", "hidden", "always_include", "notes"]
        widgets = {"notes": forms.Textarea(attrs={"rows": 3})}

    def clean(self):
        data = super().clean()
        if data.get("always_include") and data.get("classification") != Source.Classification.CANON:
            self.add_error("always_include", "Only Canon can be always included; reclassify it as Canon first.")
        return data
