"""Sources: folders, Git repositories, web sites and S3 prefixes kept in sync with a corpus
(docs/sources.md)."""
