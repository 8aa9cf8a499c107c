"""Importing a folder from the command line."""

import shutil

import pytest
from django.core.management import CommandError, call_command

from knowledge.models import Source
from tests.knowledge.conftest import FIXTURES


def test_a_folder_is_imported_and_bad_files_are_named(campaign, tmp_path, capsys):
    for name in ["canon.md", "reference.md", "invalid-utf8.txt", "README.md"]:
        shutil.copy(FIXTURES / name, tmp_path / name)
    (tmp_path / "picture.png").write_bytes(b"\x89PNG")
    with pytest.raises(CommandError, match="1 file"):
        call_command("import_knowledge", campaign.pk, str(tmp_path), "--class", "canon")
    output = capsys.readouterr()
    assert "imported canon.md" in output.out and "imported reference.md" in output.out
    assert "refused invalid-utf8.txt" in output.err and "offset" in output.err
    assert set(Source.objects.values_list("filename", flat=True)) == {"canon.md", "reference.md", "README.md"}
    assert set(Source.objects.values_list("classification", flat=True)) == {"canon"}


def test_always_include_needs_canon_on_the_command_line(campaign, tmp_path):
    with pytest.raises(CommandError, match="Only Canon"):
        call_command("import_knowledge", campaign.pk, str(tmp_path), "--always-include")
