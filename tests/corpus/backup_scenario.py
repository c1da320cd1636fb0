"""A portal's content made by the real services, and its observable state, for the backup and
upgrade tests (tests/corpus/test_backups.py, test_upgrade.py). Run in its own process against the
DATA_DIR / DATABASE_URL / BUILD_STORAGE_URL of its environment:

    python tests/corpus/backup_scenario.py make [--small] [--meaning]  # users, corpora built and appended,
                                                                       # a chat, a token
    python tests/corpus/backup_scenario.py state      # JSON of every row a user sees, and searches
    python tests/corpus/backup_scenario.py timestamps # every date and time of every row, in full

`make` prints the API token's secret as JSON; `state TOKEN` checks it still authenticates. It uses
only services that the previous release has too, so the upgrade fixture is made by the same script.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hdrag_site.settings")

import django  # noqa: E402

django.setup()

from django.contrib.auth.models import Group, User  # noqa: E402
from django.core.files.uploadedfile import SimpleUploadedFile  # noqa: E402

try:  # the layout since API tokens moved to accounts; the earlier release (the upgrade fixture's) had api
    from accounts.services.tokens import api_token_authenticate, api_token_create
except ImportError:
    from api.services import api_token_authenticate, api_token_create
from chat.models import Conversation, Message, MessageMemory  # noqa: E402
from corpus.models import Corpus, Dataset, IndexBuild, Memory  # noqa: E402
from corpus.services.appends import append_start  # noqa: E402
from corpus.services.builds import build_start  # noqa: E402
from corpus.services.corpora import corpus_create, dataset_upload  # noqa: E402
from hdrag_site.celery import app as celery_app  # noqa: E402
from memory.services import memories_search  # noqa: E402

SMALL_HDC = {"hdc_dimensions": 1024, "hdc_ngram": 3}
NOTES = ["The quick brown fox jumps over the lazy dog near the river bank.",
         "Photosynthesis converts light energy into chemical energy stored in glucose molecules.",
         "A binary search halves the remaining interval at every comparison step of the loop.",
         "The French revolution began in 1789 with the storming of the Bastille prison in Paris."]
MORE_NOTES = ["Mitochondria are the membrane-bound organelles that produce most of the cell's ATP.",
              "Python generators yield values lazily, one at a time, when the caller asks for the next."]
RECIPES = ["Knead the dough for ten minutes until it is smooth and springs back when pressed.",
           "Simmer the tomato sauce slowly with garlic, basil and a splash of olive oil.",
           "Whisk the egg whites to stiff peaks before folding them into the chocolate batter."]
QUERIES = ["what does photosynthesis convert", "binary search interval", "mitochondria ATP",
           "generators yield values", "knead the dough", "tomato sauce garlic"]


def _upload(corpus: Corpus, user: User, name: str, texts: list[str]) -> Dataset:
    content = "".join(json.dumps({"text": t}) + "\n" for t in texts).encode()
    return dataset_upload(corpus=corpus, user=user, uploaded_file=SimpleUploadedFile(name, content))


def _run(job: IndexBuild) -> IndexBuild:
    """The job, which ran in this process when it was queued (Celery eager: the test has no worker)."""
    job.refresh_from_db()
    if job.status != IndexBuild.Status.SUCCEEDED:
        raise SystemExit(f"job {job.pk} {job.status}: {job.error}")
    return job


def make(*, small: bool = False, meaning: bool = False) -> dict:
    """`small`: one corpus (the upgrade fixture, kept in the repository); `meaning`: the second
    corpus has the meaning channel (its segment holds meaning rows)."""
    celery_app.conf.task_always_eager = True
    readers = Group.objects.create(name="readers")
    owner = User.objects.create_user("owner", "owner@example.org", "owner-password-1")
    member = User.objects.create_user("member", "member@example.org", "member-password-1")
    member.groups.add(readers)
    User.objects.create_user("outsider", "outsider@example.org", "outsider-password-1")
    notes = corpus_create(owner=owner, name="Team notes", visibility=Corpus.Visibility.GROUPS,
                          readable_groups=[readers], writable_groups=[], **SMALL_HDC)
    _upload(notes, owner, "notes.jsonl", NOTES)
    _run(build_start(corpus=notes, user=owner))
    _upload(notes, owner, "more.jsonl", MORE_NOTES)
    notes.refresh_from_db()
    _run(append_start(corpus=notes, user=owner))
    if not small:
        options = {"meaning_channel": True} if meaning else {}
        recipes = corpus_create(owner=member, name="Recipes", **SMALL_HDC, **options)
        _upload(recipes, member, "recipes.jsonl", RECIPES)
        _run(build_start(corpus=recipes, user=member))
    _, secret = api_token_create(user=owner, name="integration")
    _conversation(owner, notes)
    return {"token": secret}


def _conversation(owner: User, corpus: Corpus) -> None:
    """A chat turn and its answer with citations and the memories that primed it, as chat.services stores
    them."""
    conversation = Conversation.objects.create(owner=owner, title="Photosynthesis")
    conversation.corpora.add(corpus)
    Message.objects.create(
        conversation=conversation, role=Message.Role.USER, content="What does photosynthesis do?"
    )
    memory = Memory.objects.filter(corpus=corpus, text__contains="Photosynthesis").first()
    answer = Message.objects.create(
        conversation=conversation, role=Message.Role.ASSISTANT, status=Message.Status.COMPLETE,
        content="It converts light energy into chemical energy.", prompt_tokens=120, completion_tokens=11,
        finish_reason="stop", grounding=1.0,
        citations=[{"start": 0, "end": 47, "memories": [1], "certainty": 0.9, "unsure": False}])
    MessageMemory.objects.create(message=answer, rank=1, memory=memory, memory_key=memory.content_hash,
                                 corpus_name=corpus.name, source="notes.jsonl", score=0.5,
                                 token_count=memory.token_count, excerpt=memory.text)


def _text(memory) -> str:  # noqa: ANN001 - a MemoryRecord; a dict in the earlier release
    return memory["text"] if isinstance(memory, dict) else memory.text


def _searches(corpus: Corpus) -> dict:
    results = {}
    for query in QUERIES:
        found = memories_search(user=corpus.owner, corpus_ids=[corpus.pk], query=query)
        results[query] = [[_text(r.memory), round(r.hdc_score, 6), r.fused_score] for r in found]
    return results


def state(token: str | None) -> dict:
    corpora = {}
    for corpus in Corpus.objects.order_by("name"):
        segments = IndexBuild.objects.in_bulk(corpus.serving_build_ids)
        corpora[corpus.name] = {
            "owner": corpus.owner.username,
            "visibility": corpus.visibility,
            "readable_groups": sorted(g.name for g in corpus.readable_groups.all()),
            "serving": [
                [segments[i].number, segments[i].kind, segments[i].documents]
                for i in corpus.serving_build_ids
            ],
            "datasets": sorted([d.name, d.sha256, d.size, d.record_count] for d in corpus.datasets.all()),
            "memories": Memory.objects.filter(corpus=corpus).count(),
            "searches": _searches(corpus),
        }
    conversations = [
        {
            "owner": c.owner.username,
            "title": c.title,
            "corpora": sorted(x.name for x in c.corpora.all()),
            "messages": [
                [
                    m.role,
                    m.content,
                    m.status,
                    m.grounding,
                    m.citations,
                    [
                        [mm.rank, mm.memory.content_hash if mm.memory else None, mm.memory_key, mm.excerpt]
                        for mm in m.memories.order_by("rank")
                    ],
                ]
                for m in c.messages.order_by("pk")
            ],
        }
        for c in Conversation.objects.order_by("pk")
    ]
    users = sorted([u.username, u.email, u.password, sorted(g.name for g in u.groups.all())]
                   for u in User.objects.all())
    authenticated = api_token_authenticate(raw=token) if token else None
    return {"users": users, "corpora": corpora, "conversations": conversations,
            "token_user": authenticated.user.username if authenticated else None}


def timestamps() -> dict:
    """{model: {pk: [each date, time and datetime field's value, ISO 8601 in full]}} for every row
    a backup holds (sessions are not in one)."""
    from django.apps import apps
    from django.db import models

    kinds = (models.DateTimeField, models.DateField, models.TimeField)
    found = {}
    for model in apps.get_models():
        fields = [f.attname for f in model._meta.concrete_fields if isinstance(f, kinds)]
        if fields and model._meta.app_label != "sessions":
            found[model._meta.label] = {str(row[0]): [v.isoformat() if v else None for v in row[1:]]
                                        for row in model.objects.order_by("pk").values_list("pk", *fields)}
    return found


def append() -> dict:
    """Upload one more dataset to the team's notes and append it: the restored or upgraded portal writes."""
    celery_app.conf.task_always_eager = True
    notes = Corpus.objects.get(name="Team notes")
    _upload(
        notes,
        notes.owner,
        "late.jsonl",
        ["Glaciers carve U-shaped valleys as they slowly grind down the rock."],
    )
    notes.refresh_from_db()
    job = _run(append_start(corpus=notes, user=notes.owner))
    notes.refresh_from_db()
    found = memories_search(user=notes.owner, corpus_ids=[notes.pk], query="glaciers carve valleys")
    return {"job": [job.number, job.kind, job.status], "serving": len(notes.serving_build_ids),
            "found": [_text(r.memory) for r in found]}


def append_many(count: int) -> dict:
    """Append `count` generated notes to the team's notes: an append long enough to back up under."""
    celery_app.conf.task_always_eager = True
    notes = Corpus.objects.get(name="Team notes")
    texts = [f"Field note {i}: the {['heron', 'otter', 'lichen', 'basalt'][i % 4]} at station {i * 7 % 997} "
             f"was logged on survey round {i // 50} with reading {i * 13 % 1009}." for i in range(count)]
    _upload(notes, notes.owner, "survey.jsonl", texts)
    notes.refresh_from_db()
    job = _run(append_start(corpus=notes, user=notes.owner))
    return {"job": [job.number, job.kind, job.status]}


def chat(token: str) -> dict:
    """One more turn of the stored conversation through the API, with the token (LLM_BASE_URL)."""
    from django.test import Client

    conversation = Conversation.objects.get(title="Photosynthesis")
    response = Client().post(f"/api/v1/conversations/{conversation.pk}/messages/",
                             {"content": "And where is the energy stored?"}, content_type="application/json",
                             HTTP_AUTHORIZATION=f"Bearer {token}")
    body = response.json()
    return {
        "status": response.status_code,
        "turn": body.get("status"),
        "answer": body.get("message", {}).get("content", ""),
        "memories": [
            m.get("excerpt", m.get("text", "")) for m in body.get("message", {}).get("memories", [])
        ],
        "messages": conversation.messages.count(),
    }


if __name__ == "__main__":
    command = sys.argv[1]
    if command == "make":
        output = make(small="--small" in sys.argv, meaning="--meaning" in sys.argv)
    elif command == "append":
        output = append()
    elif command == "append_many":
        output = append_many(int(sys.argv[2]))
    elif command == "timestamps":
        output = timestamps()
    elif command == "chat":
        output = chat(sys.argv[2])
    else:
        output = state(sys.argv[2] if len(sys.argv) > 2 else None)
    print(json.dumps(output, sort_keys=True))
