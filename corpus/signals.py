"""Side effects of corpus rows that every path (portal, admin, cascades, bulk deletes) must share."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models.signals import post_delete
from django.dispatch import receiver

from corpus.models import Corpus
from corpus.services.multivector import store_drop


def _drop_store(corpus_id: int) -> None:
    # Imported here: chromadb is heavy, and only processes that delete corpora need it.

    store_drop(corpus_id=corpus_id)


@receiver(post_delete, sender=Corpus, dispatch_uid="corpus_drop_store")
def drop_store_after_delete(sender: type[Corpus], instance: Corpus, using: str, **kwargs: Any) -> None:
    # A signal rather than a line in corpus_delete: the admin's bulk action deletes a queryset,
    # which sends post_delete per row but calls no service. After commit, so a rolled-back
    # deletion keeps its embeddings; the id is read now because Django clears instance.pk later.
    corpus_id = instance.pk
    transaction.on_commit(lambda: _drop_store(corpus_id), using=using)
