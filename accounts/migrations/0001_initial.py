import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('api', '0001_initial'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    # API tokens move to this app in Django's state only: the table stays api_apitoken.
    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="ApiToken",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                            ),
                        ),
                        ("name", models.CharField(max_length=100)),
                        ("key_hash", models.CharField(max_length=64, unique=True)),
                        (
                            "prefix",
                            models.CharField(
                                help_text="The token's first characters, to recognise it in lists.",
                                max_length=16,
                            ),
                        ),
                        ("created", models.DateTimeField(auto_now_add=True)),
                        ("last_used", models.DateTimeField(blank=True, null=True)),
                        ("revoked", models.DateTimeField(blank=True, null=True)),
                        (
                            "user",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="api_tokens",
                                to=settings.AUTH_USER_MODEL,
                            ),
                        ),
                    ],
                    options={
                        "db_table": "api_apitoken",
                        "ordering": ["-created", "-id"],
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
