from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('api', '0001_initial'),
        ('accounts', '0001_initial'),
    ]

    # State only: the table now belongs to accounts.ApiToken (accounts/migrations/0001_initial).
    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(
                    name='ApiToken',
                ),
            ],
            database_operations=[],
        ),
    ]
