"""A per-campaign counter that moves whenever retrieval's view of the memories changes, kept by triggers."""

from django.db import migrations, models

from storyteller.vendors import POSTGRES, SQLITE, RunSQLOn

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

# PostgreSQL's triggers call a function (issue 31): the same rows, the same counter, the same statement.
PG_FUNCTION = """
    CREATE FUNCTION memory_bump_stamp() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO memory_bankstamp (campaign_id, generation)
        VALUES (CASE WHEN TG_OP = 'DELETE' THEN OLD.campaign_id ELSE NEW.campaign_id END, 1)
        ON CONFLICT (campaign_id) DO UPDATE SET generation = memory_bankstamp.generation + 1;
        RETURN NULL;
    END $$
"""
PG_TRIGGERS = {name: body.split(" BEGIN ")[0] for name, body in TRIGGERS.items()}


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
        RunSQLOn(
            SQLITE,
            sql=[f"CREATE TRIGGER {name} {body}" for name, body in TRIGGERS.items()],
            reverse_sql=[f"DROP TRIGGER {name}" for name in TRIGGERS],
        ),
        RunSQLOn(
            POSTGRES,
            sql=[PG_FUNCTION, *(f"CREATE TRIGGER {name} {on} FOR EACH ROW EXECUTE FUNCTION memory_bump_stamp()"
                                for name, on in PG_TRIGGERS.items())],
            reverse_sql=[*(f"DROP TRIGGER {name} ON memory_{'memoryvector' if 'vector' in name else 'memory'}"
                           for name in PG_TRIGGERS), "DROP FUNCTION memory_bump_stamp()"],
        ),
    ]
