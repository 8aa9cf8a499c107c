"""A per-campaign counter that moves whenever retrieval's view of the memories changes, kept by triggers."""

from django.db import migrations, models

RETRIEVED = "branch_id, depth, text, revision, authority, pinned, forgotten, enabled, campaign_id"


def _bump(campaign):
    return (f"INSERT INTO memory_bankstamp (campaign_id, generation) VALUES ({campaign}, 1) "
            "ON CONFLICT (campaign_id) DO UPDATE SET generation = generation + 1;")


TRIGGERS = {
    "memory_stamp_insert": f"AFTER INSERT ON memory_memory BEGIN {_bump('NEW.campaign_id')} END",
    "memory_stamp_update": f"AFTER UPDATE OF {RETRIEVED} ON memory_memory BEGIN {_bump('NEW.campaign_id')} END",
    "memory_stamp_delete": f"AFTER DELETE ON memory_memory BEGIN {_bump('OLD.campaign_id')} END",
    "memory_vector_stamp_insert": f"AFTER INSERT ON memory_memoryvector BEGIN {_bump('NEW.campaign_id')} END",
    "memory_vector_stamp_update": f"AFTER UPDATE ON memory_memoryvector BEGIN {_bump('NEW.campaign_id')} END",
    "memory_vector_stamp_delete": f"AFTER DELETE ON memory_memoryvector BEGIN {_bump('OLD.campaign_id')} END",
}


class Migration(migrations.Migration):

    dependencies = [
        ('memory', '0006_text_limits'),
    ]

    operations = [
        migrations.CreateModel(
            name='BankStamp',
            fields=[
                ('campaign_id', models.BigIntegerField(primary_key=True, serialize=False)),
                ('generation', models.BigIntegerField(default=0)),
            ],
        ),
        migrations.RunSQL(
            sql=[f"CREATE TRIGGER {name} {body}" for name, body in TRIGGERS.items()],
            reverse_sql=[f"DROP TRIGGER {name}" for name in TRIGGERS],
        ),
    ]
