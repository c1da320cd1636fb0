"""One end-to-end run on the real model: build from Python's own docs, search by paraphrase."""

from __future__ import annotations

import json
from pathlib import Path
from pydoc_data.topics import topics

import pytest

from engine.build import build_index
from engine.config import Config
from engine.loaded_build import load_corpus
from engine.query import BlendState
from engine.retrieval import CONTEXT_DELIMITER, Retriever, SearchTarget
from engine.spm import GGUFTokenizer

# Paraphrases (no sentence copied from the docs) -> topics whose paragraphs answer them.
QUERIES = [
    ("what does the yield keyword do when a function produces a sequence of values lazily", {"yield"}),
    (
        "the program hit a runtime error; how are errors raised, caught and handled",
        {"exceptions", "try", "raise"},
    ),
    ("placeholders in braces with width, alignment and precision when formatting text", {"formatstrings"}),
]


@pytest.fixture(scope="module")
def built(tmp_path_factory, gemma_gguf):
    root = tmp_path_factory.mktemp("e2e")
    dataset = root / "topics.jsonl"
    paragraph_topics = []
    with open(dataset, "w", encoding="utf-8") as handle:
        for name, text in sorted(topics.items()):
            for paragraph in text.split("\n\n"):
                if len(paragraph.split()) >= 25:
                    handle.write(json.dumps({"text": paragraph.strip()}) + "\n")
                    paragraph_topics.append(name)
    tokenizer = GGUFTokenizer.from_gguf(gemma_gguf)
    result = build_index(
        datasets=[(1, "pydoc-topics", dataset)],
        out_dir=root / "build",
        gguf_path=gemma_gguf,
        tokenizer=tokenizer,
        config=Config(),
        cache_dir=Path(gemma_gguf).parent.parent / "embeddings",
    )
    return result, tokenizer, paragraph_topics


def test_paraphrase_finds_its_topic(built):
    result, tokenizer, paragraph_topics = built
    assert result.documents > 300
    corpus = load_corpus(result.out_dir)
    assert corpus.dims == 10000
    retriever = Retriever(tokenizer, Config())
    target = SearchTarget(corpus, corpus.store, "pydoc")
    for query, expected in QUERIES:
        results = retriever.search(query, [target])
        found = [paragraph_topics[r.memory.metadata["record"] - 1] for r in results[:5]]
        assert expected & set(found), f"{query!r}: top topics {found}"
        assert sum(r.memory.token_count for r in results) <= Config().max_context_tokens

    top = retriever.search(QUERIES[1][0], [target], top_document=True)
    q_pos, q_neg = retriever.query_vector(corpus, QUERIES[1][0])
    rows, scores = corpus.index.search_exact(q_pos, q_neg, 1)
    assert [(r.memory.hdv_idx, r.hdc_score) for r in top] == [(int(rows[0]), float(scores[0]))]

    context = retriever.get_context(QUERIES[0][0], [target], token_budget=1500)
    parts = context.split(CONTEXT_DELIMITER)
    assert len(parts) >= 2 and all(parts)
    assert parts[0] == retriever.search(QUERIES[0][0], [target], token_budget=1500)[0].memory.text

    # A short referential follow-up leans on the conversation's last response, not on its own words.
    response = "Generators pause at each yield and resume where they left off when next() is called."
    blend = BlendState()
    blend.add_turn(response)
    def top_rows(query: str, state: BlendState | None = None) -> list[int]:
        q_pos, q_neg = retriever.query_vector(corpus, query, state)
        return corpus.index.search_exact(q_pos, q_neg, 10)[0].tolist()

    follow_up, alone, as_query = top_rows("and then?", blend), top_rows("and then?"), top_rows(response)
    assert len(set(follow_up) & set(as_query)) > len(set(follow_up) & set(alone))
