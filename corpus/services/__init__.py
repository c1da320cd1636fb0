"""Writes: corpora and datasets (`corpora`), index builds (`builds`)."""
