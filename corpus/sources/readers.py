"""Readers that follow the source: a source's ordered rules `path glob -> groups` (the first that
matches a document's path wins) and, for a folder, the file's POSIX group as the portal group of the
same name. A document that no rule (and no POSIX group) names is read by its corpus's readers.

Readers are metadata (`corpus.document_access`): a sync gives them to the documents it stores or
sees changed, and a change of the rules gives them again to every document of the source, without
a rebuild; searches compute who reads what at each request.

A rule's group that does not exist yet is created empty (as one from the identity provider would
be): a document for "hr" stays closed to everyone but the corpus's managers until someone is in hr,
rather than open to the whole corpus.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from typing import Any

from django.contrib.auth.models import Group
from django.db import transaction

from accounts.audit import audit_record
from core.errors import ApplicationError
from corpus.document_access import dataset_readers_set
from corpus.sources.models import Source, SourceDocument

MAX_RULES = 200


def rules_check(rules: Any) -> list[dict[str, Any]]:
    """The rules in their stored shape ([{"pattern": str, "groups": [str, ...]}], order kept), or an
    ApplicationError saying which rule is wrong and why."""
    if not isinstance(rules, list) or len(rules) > MAX_RULES:
        raise ApplicationError(
            f"Reader rules are a list of at most {MAX_RULES} rules.", {"reader_rules": rules}
        )
    clean = []
    for number, rule in enumerate(rules, start=1):
        pattern = rule.get("pattern") if isinstance(rule, dict) else None
        groups = rule.get("groups") if isinstance(rule, dict) else None
        if not isinstance(pattern, str) or not pattern.strip() or len(pattern) > 500:
            raise ApplicationError(
                f"Reader rule {number}: a path pattern (a glob such as hr/**) is needed.", {"rule": number}
            )
        if (
            not isinstance(groups, list)
            or not groups
            or not all(isinstance(g, str) and g.strip() and len(g) <= 150 for g in groups)
        ):
            raise ApplicationError(
                f'Reader rule {number}: name one group or more (e.g. ["hr"]).', {"rule": number}
            )
        clean.append({"pattern": pattern.strip(), "groups": sorted({g.strip() for g in groups})})
    return clean


def groups_for(source: Source, document: SourceDocument) -> list[str] | None:
    """The names of the groups that may read `document` by the source's rules; None: no rule
    names it (its corpus's readers)."""
    for rule in source.reader_rules or []:
        if fnmatch.fnmatchcase(document.path, rule["pattern"]):
            return list(rule["groups"])
    if source.posix_groups and source.kind == Source.Kind.FOLDER and document.version.get("group"):
        return [str(document.version["group"])]
    return None


def readers_apply(source: Source, documents: Iterable[SourceDocument]) -> int:
    """Give each document's dataset (and the older version it replaces, while that one serves) the
    readers its path gets; returns how many documents were given readers of their own."""
    named = 0
    groups: dict[str, Group] = {}
    for document in documents:
        names = groups_for(source, document)
        for name in names or []:
            if name not in groups:
                groups[name] = Group.objects.get_or_create(name=name)[0]
        chosen = [groups[name] for name in names or []]
        named += bool(chosen)
        versions = [document.dataset, getattr(document.dataset, "replaces", None)]
        for dataset in (d for d in versions if d is not None):
            dataset_readers_set(dataset=dataset, groups=chosen)
    return named


def source_readers_update(
    *, source: Source, reader_rules: Any = None, posix_groups: bool | None = None
) -> Source:
    """Change the source's reader rules (and, for a folder, whether a file's POSIX group reads it),
    then give every document of the source its readers again: effective at the next search, no
    rebuild. Bad rules raise ApplicationError and change nothing."""
    if reader_rules is not None:
        source.reader_rules = rules_check(reader_rules)
    if posix_groups is not None:
        if posix_groups and source.kind != Source.Kind.FOLDER:
            raise ApplicationError(
                "Only a folder source can take a file's POSIX group as its readers.",
                {"posix_groups": posix_groups},
            )
        source.posix_groups = posix_groups
    with transaction.atomic():
        source.save(update_fields=["reader_rules", "posix_groups"])
        named = readers_apply(source, source.documents.select_related("dataset", "dataset__replaces"))
    audit_record(
        action="source_readers_changed",
        target=f"{source.name} of corpus #{source.corpus_id}",
        rules=len(source.reader_rules),
        posix_groups=source.posix_groups,
        documents_with_readers=named,
    )
    return source
