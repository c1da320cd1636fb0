"""Memories: the indexed documents of one build, in SQL beside the build's bitmap files."""

from __future__ import annotations

from django.db import models


class Memory(models.Model):
    """One row of a build's bitmap index (`hdv_idx`), with its text and where it came from."""

    corpus = models.ForeignKey("corpus.Corpus", on_delete=models.CASCADE, related_name="memories")
    build = models.ForeignKey("corpus.IndexBuild", on_delete=models.CASCADE, related_name="memories")
    hdv_idx = models.PositiveIntegerField(help_text="Row in the build's bitmap index.")
    content_hash = models.CharField(max_length=32, help_text="blake2b-128 of the text (engine content id).")
    text = models.TextField()
    dataset = models.ForeignKey("corpus.Dataset", null=True, blank=True, on_delete=models.SET_NULL,
                                related_name="memories")
    metadata = models.JSONField(default=dict, blank=True)
    token_count = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["build", "hdv_idx"]
        constraints = [models.UniqueConstraint(fields=["build", "hdv_idx"], name="memory_unique_row_per_build")]
        indexes = [models.Index(fields=["build", "dataset"]), models.Index(fields=["content_hash"])]
        verbose_name_plural = "memories"

    def __str__(self) -> str:
        return f"{self.content_hash[:8]}: {self.text[:60]}"
