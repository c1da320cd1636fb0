from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('corpus', '0009_segments'),
        ('accounts', '0002_groupmanager'),
    ]

    # State only: the table now belongs to accounts.GroupManager (accounts/migrations/0002_groupmanager).
    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(
                    name='GroupManager',
                ),
            ],
            database_operations=[],
        ),
    ]
