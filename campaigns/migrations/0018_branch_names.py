
from django.db import migrations, models


def number_branches(apps, schema_editor):
    """Number every campaign's branches from 1, in the order they were made (one UPDATE, a window function)."""
    schema_editor.execute(
        "UPDATE campaigns_branch SET number = (SELECT n FROM (SELECT id, ROW_NUMBER() OVER "
        "(PARTITION BY campaign_id ORDER BY id) AS n FROM campaigns_branch) AS numbered "
        "WHERE numbered.id = campaigns_branch.id)")


class Migration(migrations.Migration):

    dependencies = [
        ('campaigns', '0017_archived_campaigns'),
    ]

    operations = [
        migrations.AddField(
            model_name='branch',
            name='name',
            field=models.CharField(blank=True, help_text='What you call this line; empty: the action where it split.', max_length=120),
        ),
        migrations.AddField(
            model_name='branch',
            name='number',
            field=models.PositiveIntegerField(default=0, editable=False),
        ),
        migrations.RunPython(number_branches, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name='branch',
            constraint=models.UniqueConstraint(fields=('campaign', 'number'), name='one_branch_per_number'),
        ),
    ]
