"""The meaning channel on by default for new corpora (existing corpora keep their value), and each
build's meaning rows read in the background, their progress on the build's row. Builds that wrote
them inline before (a corpus that had the channel on) are marked read."""

from __future__ import annotations

from django.db import migrations, models


def mark_read(apps, schema_editor) -> None:  # noqa: ANN001, ARG001 - a migration's signature
    IndexBuild = apps.get_model("corpus", "IndexBuild")
    IndexBuild.objects.filter(status="succeeded", parameters__meaning_channel=True).exclude(
        parameters__late_interaction=True).update(meaning="done")


class Migration(migrations.Migration):

    dependencies = [
        ("corpus", "0013_document_readers"),
    ]

    operations = [
        migrations.AlterField(
            model_name="corpus",
            name="meaning_channel",
            field=models.BooleanField(default=True, help_text=(
                "Also read each memory with a small sentence encoder (all-MiniLM-L6-v2), so a question "
                "worded unlike the text still finds it. In the background after a build: the corpus is "
                "searchable by HDC and words at once, by meaning as its segments are read (tens of "
                "memories a second)."), verbose_name="Meaning channel"),
        ),
        migrations.AddField(
            model_name="indexbuild",
            name="meaning",
            field=models.CharField(blank=True, choices=[
                ("", "No meaning rows"), ("pending", "Waiting to be read by meaning"),
                ("running", "Being read by meaning"), ("done", "Read by meaning"),
                ("failed", "Reading by meaning failed")], default="", max_length=16),
        ),
        migrations.AddField(
            model_name="indexbuild",
            name="meaning_done",
            field=models.BigIntegerField(default=0, help_text="Memories read by meaning so far."),
        ),
        migrations.AddField(
            model_name="indexbuild",
            name="meaning_total",
            field=models.BigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="indexbuild",
            name="meaning_seconds",
            field=models.FloatField(default=0.0, help_text="The encoder's time on this build's memories."),
        ),
        migrations.AddField(
            model_name="indexbuild",
            name="meaning_heartbeat",
            field=models.DateTimeField(blank=True, null=True,
                                       help_text="Last sign of life of the task reading it by meaning."),
        ),
        migrations.AddField(
            model_name="indexbuild",
            name="meaning_worker",
            field=models.CharField(blank=True, help_text="The process reading it by meaning (as `worker`).",
                                   max_length=300),
        ),
        migrations.AddField(
            model_name="indexbuild",
            name="meaning_error",
            field=models.TextField(blank=True),
        ),
        migrations.RunPython(mark_read, migrations.RunPython.noop),
    ]
