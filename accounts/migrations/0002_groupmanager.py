import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0001_initial'),
        ('auth', '0012_alter_user_first_name_max_length'),
        ('corpus', '0009_segments'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    # Group managers move to this app in Django's state only: the table stays corpus_groupmanager.
    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="GroupManager",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        (
                            "group",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="managers",
                                to="auth.group",
                            ),
                        ),
                        (
                            "user",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="managed_groups",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                    ],
                    options={
                        "db_table": "corpus_groupmanager",
                        "constraints": [
                            models.UniqueConstraint(fields=("group", "user"), name="groupmanager_unique")
                        ],
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
