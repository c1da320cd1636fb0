"""The corpus app's models, where Django looks for them: corpora, datasets, builds and memory rows
(`corpora.py`) and the sources' (`corpus/sources/models.py`), each module importing only what it
stands on, so the two never import each other."""

from corpus.models.corpora import (
    APPEND_PHASE_SHARES,
    BUILD_PHASE_SHARES,
    FORMAT_LABELS,
    MEANING_SHARE,
    Corpus,
    Dataset,
    IndexBuild,
    Memory,
)
from corpus.sources.models import Source, SourceDocument

__all__ = ["APPEND_PHASE_SHARES", "BUILD_PHASE_SHARES", "FORMAT_LABELS", "MEANING_SHARE", "Corpus", "Dataset",
           "IndexBuild", "Memory", "Source", "SourceDocument"]
