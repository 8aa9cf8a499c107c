import django.core.validators
import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('campaigns', '0019_branch_names'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='Seat',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('character', models.CharField(blank=True, help_text='The cast key this seat plays; empty for a spectator.', max_length=200)),
                ('kind', models.CharField(choices=[('player', 'Player'), ('spectator', 'Spectator')], default='player', max_length=10)),
                ('status', models.CharField(choices=[('open', 'Waiting for someone'), ('seated', 'Seated'), ('paused', 'Paused'), ('removed', 'Removed')], default='open', max_length=10)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('updated_at', models.DateTimeField(auto_now=True)),
                ('campaign', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='seats', to='campaigns.campaign')),
                ('user', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='seats', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'ordering': ['campaign', 'id'],
                'indexes': [models.Index(fields=['user', 'campaign'], name='campaigns_s_user_id_07e65b_idx')],
                'constraints': [models.UniqueConstraint(condition=models.Q(('status', 'removed'), _negated=True), fields=('campaign', 'user'), name='one_live_seat_per_user')],
            },
        ),
        migrations.CreateModel(
            name='Invitation',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('token_hash', models.CharField(editable=False, max_length=64, unique=True)),
                ('expires_at', models.DateTimeField()),
                ('used_at', models.DateTimeField(blank=True, null=True)),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('seat', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='invitations', to='campaigns.seat')),
                ('used_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'ordering': ['-created_at', '-id'],
            },
        ),
        migrations.CreateModel(
            name='Whisper',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('text', models.TextField(validators=[django.core.validators.MaxLengthValidator(2000)])),
                ('depth', models.PositiveIntegerField(help_text="The head's depth when it was sent.")),
                ('created_at', models.DateTimeField(auto_now_add=True)),
                ('branch', models.ForeignKey(on_delete=django.db.models.deletion.RESTRICT, related_name='+', to='campaigns.branch')),
                ('campaign', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='whispers', to='campaigns.campaign')),
                ('seat', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='whispers', to='campaigns.seat')),
            ],
            options={
                'ordering': ['created_at', 'id'],
                'indexes': [models.Index(fields=['campaign', 'branch', 'depth'], name='campaigns_w_campaig_309194_idx')],
            },
        ),
        migrations.CreateModel(
            name='SeatsCampaign',
            fields=[],
            options={
                'proxy': True,
                'indexes': [],
                'constraints': [],
            },
            bases=('campaigns.campaign',),
        ),
    ]
