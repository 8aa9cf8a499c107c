from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('knowledge', '0004_lorebooks'),
    ]

    operations = [
        migrations.AddField(
            model_name='source',
            name='keyed',
            field=models.BooleanField(default=False, editable=False, help_text='Entries are inserted when their keys appear in the story\'s recent turns.'),
        ),
    ]
