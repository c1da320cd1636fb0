"""The pages a team uses every day: dashboard, search with its pipeline view, a memory in full,
readable stats and human labels (admin included). Data comes from real uploads and builds."""

from __future__ import annotations

import re

import pytest
from django.urls import reverse

from corpus.models import Dataset, Memory
from memory.services import memories_search
from memory.svg import nice_ticks
from tests.plugins.portal import TEXTS, build_now, login, upload


@pytest.fixture
def built(corpus, owner, django_capture_on_commit_callbacks):
    upload(corpus, owner)
    build_now(corpus, owner, django_capture_on_commit_callbacks)
    return corpus


def test_dashboard_first_run_then_corpora_and_conversations(
    owner, client_for, django_capture_on_commit_callbacks
):
    client = client_for(owner)
    page = client.get("/").content.decode()
    assert 'id="first-run"' in page and "Create a corpus" in page
    from corpus.services.corpora import corpus_create

    corpus = corpus_create(owner=owner, name="Handbook", hdc_dimensions=1024, hdc_ngram=3)
    upload(corpus, owner)
    build_now(corpus, owner, django_capture_on_commit_callbacks)
    client.post(reverse("chat:new"))
    page = client.get("/").content.decode()
    assert 'id="first-run"' not in page
    table = page[page.index('id="dashboard-corpora"'):]
    assert "Handbook" in table and f">{len(TEXTS)}<" in table and "Succeeded" in table
    assert 'id="dashboard-conversations"' in page


def test_dashboard_hides_other_peoples_private_corpora(corpus, outsider):
    assert "Team notes" not in login(outsider).get("/").content.decode()


def test_search_ranks_by_score_and_shows_the_pipeline_one_toggle_away(built, owner):
    client = login(owner)
    page = client.get(reverse("memory:search"), {"q": "storming of the Bastille in Paris"}).content.decode()
    # The first score of each result is what the page ranks by, shown in order, and the page says
    # which it is: the fused ranking where the corpus's rule fuses exact words, else HDC (issue 31.3).
    heads = re.findall(r'<div class="result-head">\s*<span class="score"[^>]*>([^<]+)</span>', page)
    keys = [float(h.split()[-1].replace(",", "")) for h in heads]
    assert len(keys) >= 2 and keys == sorted(keys, reverse=True), heads
    scores = keys
    fused = heads[0].startswith("rank ")
    assert all(h.startswith("rank ") == fused for h in heads)
    assert ("ranked by the fused ranking" if fused else "ranked by HDC score") in page
    assert 'id="pipeline"' not in page
    assert "<mark>Bastille</mark>" in page and "<mark>Paris</mark>" in page and "<mark>the</mark>" not in page
    toggle = re.search(r'id="order-toggle" href="\?([^"]+)"', page).group(1).replace("&amp;", "&")
    pipeline = client.get(reverse("memory:search") + "?" + toggle).content.decode()
    stages = re.findall(r"<li><strong>([\d,]+)</strong>", pipeline)
    assert len(stages) == 4
    counts = [int(s.replace(",", "")) for s in stages]
    assert counts[0] >= counts[1] >= counts[2] >= counts[3] == len(scores)
    assert "pick #1" in pipeline and "in the order the pipeline picked them" in pipeline


def test_searching_several_corpora_ranks_by_a_key_comparable_across_them(
        built, owner, django_capture_on_commit_callbacks):
    from corpus.services.corpora import corpus_create

    other = corpus_create(owner=owner, name="Other notes", hdc_dimensions=1024, hdc_ngram=3)
    upload(other, owner, ["Tides follow the moon because of its gravitational pull on the oceans.",
                          "A sextant measures the angle between a star and the horizon at sea.",
                          "Glaciers carve valleys as they slide slowly downhill under their own weight.",
                          "The capital of France is Paris, on the river Seine, where the storming began."])
    assert build_now(other, owner, django_capture_on_commit_callbacks).status == "succeeded"
    found = memories_search(
        user=owner, corpus_ids=[built.pk, other.pk], query="storming of the Bastille in Paris"
    )
    assert {r.corpus_id for r in found} == {built.pk, other.pk}, [
        (r.corpus_name, r.merge_score) for r in found
    ]
    page = (
        login(owner)
        .get(reverse("memory:search"), {"q": "storming of the Bastille in Paris"})
        .content.decode()
    )
    assert "ranked across corpora" in page, re.search(r"id=.result-count.>(.*?)</p>", page, re.S).group(1)
    heads = re.findall(r'<div class="result-head">\s*<span class="score"[^>]*>([^<]+)</span>', page)
    keys = [float(h.split()[-1]) for h in heads]
    assert heads and all(h.startswith("merged ") for h in heads) and keys == sorted(keys, reverse=True)
    excerpts = re.findall(r'<p class="excerpt">(.*?)</p>', page, re.S)
    assert any("Bastille" in e for e in excerpts) and any("Seine" in e for e in excerpts)


def test_a_hit_opens_the_memory_with_source_and_neighbours(built, owner, outsider):
    client = login(owner)
    page = client.get(reverse("memory:search"), {"q": "mitochondria ATP organelles"}).content.decode()
    link = re.search(r'<h3><a href="(/memory/(\d+)/\?q=[^"]+)">notes.jsonl</a></h3>', page)
    assert link is not None, page[:3000]
    memory = Memory.objects.get(pk=link.group(2))
    detail = client.get(link.group(1).replace("&amp;", "&")).content.decode()
    assert "<mark>Mitochondria</mark>" in detail and "Team notes" in detail
    before = Memory.objects.get(build=memory.build, hdv_idx=memory.hdv_idx - 1)
    assert before.text[:40] in detail and "After →" in detail
    assert login(outsider).get(reverse("memory:detail", args=[memory.pk])).status_code == 404


def test_search_of_a_corpus_one_cannot_read_says_so(built, outsider):
    page = (
        login(outsider).get(reverse("memory:search"), {"q": "Bastille", "corpora": built.pk}).content.decode()
    )
    assert "No corpus you can read has a built index yet" in page
    assert (
        "cannot be searched" in page
        and "0 memories" in page
        and "Bastille" not in page.split("cannot be searched")[1]
    )


def test_search_with_no_match_has_a_clear_empty_state(built, owner):
    page = (
        login(owner).get(reverse("memory:search"), {"q": "zzzz qqqq", "corpora": built.pk}).content.decode()
    )
    assert "0 memories" in page or "No memories matched" in page


def test_stats_are_readable_for_many_datasets_with_whole_number_ticks(
    corpus, owner, django_capture_on_commit_callbacks
):
    for i in range(36):
        upload(
            corpus,
            owner,
            [f"{text} (copy {i})" for text in TEXTS[: 1 + i % 4]],
            name=f"page-{i:02d}-with-a-long-name.jsonl",
        )
    build = build_now(corpus, owner, django_capture_on_commit_callbacks)
    page = login(owner).get(reverse("memory:stats", args=[corpus.pk])).content.decode()
    chart = page[page.index("Memories per dataset (36 datasets)"):]
    chart = chart[:chart.index("</svg>")]
    assert chart.count("<rect") == 16 and "21 other datasets" in chart
    ticks = re.findall(r'class="chart-tick">([^<]+)</text>', page)
    numeric = [t.replace(",", "") for t in ticks if re.fullmatch(r"[\d.,]+", t)]
    assert numeric and not any(re.fullmatch(r"\d+\.\d{2}\d*", t) and float(t) > 1 for t in numeric)
    assert "index on disk" in page and re.search(
        r"<strong>[\d.]+\s(KB|MB|bytes)</strong><span>index on disk", page
    )
    assert 'id="timings"' in page and "encode" in page and build.timings


@pytest.mark.parametrize(("peak", "integer", "expected"), [
    (7, True, [0, 2, 4, 6, 8]), (1025, True, [0, 500, 1000, 1500]), (3, True, [0, 1, 2, 3]),
    (0.37, False, [0, 0.1, 0.2, 0.3, 0.4]), (0, True, [0, 1]),
])
def test_nice_ticks(peak, integer, expected):
    assert nice_ticks(peak, integer=integer) == expected


def test_labels_are_human(built, owner, staff):
    client = login(owner)
    form = client.get(reverse("corpus:new")).content.decode()
    assert "HDC dimensions" in form and "Random seed" in form and "N-gram length" in form
    assert 'min="64"' in form and 'name="hdc_ngram" value="5" min="1" max="16"' in form
    refused = client.post(
        reverse("corpus:new"),
        {
            "name": "Zero",
            "visibility": "private",
            "hdc_dimensions": 0,
            "hdc_seed": 0,
            "hdc_ngram": 0,
            "chunk_size": 1024,
        },
    ).content.decode()
    assert refused.count("greater than or equal to") == 3
    listing = client.get(reverse("corpus:list")).content.decode()
    assert f"{len(TEXTS)} memories" in listing
    dataset = Dataset.objects.get(corpus=built)
    assert "<td>JSONL</td>" in client.get(reverse("corpus:detail", args=[built.pk])).content.decode()
    admin = login(staff)
    builds = admin.get("/admin/corpus/indexbuild/").content.decode()
    assert "Build #" not in builds or "of Team notes" in builds
    build_page = admin.get(f"/admin/corpus/indexbuild/{built.active_build_id}/change/").content.decode()
    assert not re.search(r"\d+\.\d{5,}", build_page.split("<h1>")[1])
    assert f"Build #{built.active_build.number} of Team notes (succeeded)" in build_page
    datasets = admin.get("/admin/corpus/dataset/").content.decode()
    assert f"{dataset.record_count}" in datasets


def test_settings_message_says_when_changes_apply(corpus, owner):
    client = login(owner)
    url = reverse("corpus:edit", args=[corpus.pk])
    data = {"name": corpus.name, "description": "new words", "visibility": corpus.visibility,
            "readable_groups": [], "writable_groups": [], "hdc_dimensions": corpus.hdc_dimensions,
            "hdc_seed": corpus.hdc_seed, "hdc_ngram": corpus.hdc_ngram, "chunk_size": corpus.chunk_size}
    # The checkboxes as the corpus has them (an unticked box is absent from a form's post).
    data |= {name: "on" for name in ("meaning_channel", "ocr") if getattr(corpus, name)}
    page = client.post(url, data, follow=True).content.decode()
    assert "Settings saved. They apply at once." in page
    page = client.post(url, {**data, "hdc_ngram": 4}, follow=True).content.decode()
    assert "Index settings apply to the next build" in page


def test_chat_settings_count_corpora_in_plain_english(owner, corpus):
    from chat.services import conversation_create
    from corpus.services.corpora import corpus_create

    other = corpus_create(owner=owner, name="Second")
    conversation = conversation_create(user=owner, corpus_ids=[corpus.pk, other.pk])
    page = login(owner).get(reverse("chat:detail", args=[conversation.pk])).content.decode()
    assert "2 corpora" in page and "corpuses" not in page


@pytest.mark.parametrize(
    ("filter_name", "value", "arg", "expected"),
    [
        ("num", 1234567, None, "1,234,567"),
        ("num", 0.45678, 2, "0.46"),
        ("num", None, None, ""),
        ("counted", 2, "corpus,corpora", "2 corpora"),
        ("counted", 1, "record", "1 record"),
        ("counted", 1200, "record", "1,200 records"),
        ("rate", 1168.1643569416988, None, "1,168/s"),
        ("rate", 2.345, None, "2.3/s"),
        ("seconds", 0.217, None, "217 ms"),
        ("seconds", 93.5, None, "1 min 34 s"),
        ("seconds", 7300, None, "2 h 1 min"),
        ("phase", "text_store", None, "late-interaction fill"),
        ("phase", "memory_insert", None, "memory insert"),
        ("phase", "activation", None, "switch to the new build"),
    ],
)
def test_human_number_filters(filter_name, value, arg, expected):
    from corpus.templatetags import portal

    function = getattr(portal, filter_name)
    assert (function(value) if arg is None else function(value, arg)) == expected


def test_ago_never_says_zero_minutes():
    import datetime

    from django.utils import timezone

    from corpus.templatetags.portal import ago

    assert ago(timezone.now()) == "just now"
    assert ago(timezone.now() - datetime.timedelta(days=2, hours=3)) == "2\xa0days ago"
