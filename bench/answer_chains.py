"""The multi-turn mode of `bench.answers` (`--chains`): chains of three questions in one conversation
over the demo corpus, each chain's later turns asked under several history policies
(`engine.llm.history`), paired against today's prompt in the same run.

    python -m bench.answers --chains [--split dev|held-out|all] [--arms whole,lead,questions,last]
                            [--max-tokens 200] [--out CHAINS.jsonl]

The chains are `bench/data/demo_chains.json`: "unrelated" chains (three questions on three topics)
and "follow-up" chains (the 2nd and 3rd questions need the earlier turns: "And how do I write them
back?"), from several sources (the issue's own chain, `demo_questions.json`, questions written for
this set), with a "held-out" part not looked at while choosing the policy. Each turn carries the
regular expression of the fact a right answer contains.

A chain's first question is asked once (greedy sampling, so it is the same answer under every arm);
each arm then continues a copy of that conversation (the user turn, the answer and the blend) with
the 2nd and 3rd questions. Arms alternate chain by chain, so load on the machine touches all alike.

Per arm it prints, for unrelated 2nd/3rd questions: the share of answers that repeat none of the
earlier answers' code blocks or sentences (`repeats`; goal >= 95 %), the share whose fact was in a
primed memory and the share grounded (the fact in the answer), beside the same figures on the
first questions; for follow-ups: grounded and primed shares, and the answers grounded in this arm
only and in today's ("whole") only, with the exact sign test.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from bench.answers import DATA, answer_in, check_facts, demo_texts, percentile, sign_test, use_settings

CHAINS = DATA / "demo_chains.json"
ARMS = {"whole": ["history_policy=whole"], "lead": ["history_policy=lead"],
        "questions": ["history_policy=questions"], "last": ["history_policy=last"],
        "lead+query": ["history_policy=lead", "follow_up_query=true"],
        "whole+query": ["history_policy=whole", "follow_up_query=true"]}
REFERENCE = "whole"  # today's prompt
MIN_SENTENCE_WORDS = 8  # a shorter sentence ("Here is an example:") is not a copy
MIN_CODE_LINE = 12  # characters of a code line that counts ("import csv" does not)
_FENCED = re.compile(r"^[ \t]*(?:```|~~~)[^\n]*\n(.*?)^[ \t]*(?:```|~~~)", re.MULTILINE | re.DOTALL)


def load_chains(split: str) -> list[dict]:
    chains = json.loads(CHAINS.read_text(encoding="utf-8"))["chains"]
    chosen = [c for c in chains if split == "all" or c["split"] == split]
    check_facts([tuple(turn) for c in chosen for turn in c["turns"]], demo_texts(), CHAINS.name)
    return chosen


def _normal(text: str) -> str:
    return " ".join(re.sub(r"[*_`]", "", text).lower().split())


def code_lines(answer: str) -> set[str]:
    """The significant lines of `answer`'s fenced code blocks, stripped."""
    return {line.strip() for block in _FENCED.findall(answer) for line in block.splitlines()
            if len(line.strip()) >= MIN_CODE_LINE and not line.strip().startswith("#")}


def repeats(answer: str, earlier: list[str]) -> bool:
    """Whether `answer` repeats an earlier answer's code block (half or more of a block's significant
    lines in the answer's code) or one of its sentences of at least `MIN_SENTENCE_WORDS` words."""
    from engine.citations import sentences

    mine, text = code_lines(answer), _normal(answer)
    for before in earlier:
        for block in _FENCED.findall(before):
            lines = {ln.strip() for ln in block.splitlines()
                     if len(ln.strip()) >= MIN_CODE_LINE and not ln.strip().startswith("#")}
            if lines and len(lines & mine) * 2 >= len(lines):
                return True
        long_ones = [s.text for s in sentences(before) if len(s.text.split()) >= MIN_SENTENCE_WORDS]
        if any(_normal(sentence) in text for sentence in long_ones):
            return True
    return False


def _copy_conversation(conversation_id: int) -> int:
    """A new conversation holding `conversation_id`'s settings, messages and blend (the first turn)."""
    from chat.models import Conversation, Message

    source = Conversation.objects.get(pk=conversation_id)
    corpora = list(source.corpora.all())
    copy = Conversation.objects.get(pk=conversation_id)
    copy.pk = copy.id = None
    copy._state.adding = True
    copy.save()
    copy.corpora.set(corpora)
    for message in Message.objects.filter(conversation_id=conversation_id).order_by("created", "id"):
        Message.objects.create(conversation=copy, role=message.role, content=message.content,
                               status=message.status, finish_reason=message.finish_reason)
    return copy.pk


async def run_chains(args, user, corpus_id: int, config_file: Path) -> list[dict]:  # noqa: ANN001
    """Every chain of `args.split` under every arm of `args.arms`; the rows, one per answer."""
    from channels.db import database_sync_to_async as db

    from chat.services import conversation_create

    chains = load_chains(args.split)
    chains = chains[:args.questions] if args.questions else chains  # --questions N: the first N chains
    arms = [REFERENCE, *[a for a in args.arms.split(",") if a and a != REFERENCE]]
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        raise SystemExit(f"unknown arms {unknown}; choose from {', '.join(ARMS)}")
    options = {"token_budget": args.budget} if args.budget else {}
    rows: list[dict] = []
    started = time.perf_counter()
    for number, chain in enumerate(chains):
        (first, _), *later = chain["turns"]
        use_settings(config_file, args.max_tokens, [*args.config, *ARMS[REFERENCE]])
        conversation = await db(conversation_create)(user=user, corpus_ids=[corpus_id], temperature=0.0,
                                                     **options)
        row = await answer_in(user, conversation.pk, first)
        rows.append({**row, "chain": number, "turn": 1, "arm": "", "kind": chain["kind"],
                     "split": chain["split"], "fact": chain["turns"][0][1], "earlier": []})
        # Rotate the arms' order chain by chain: none always runs right after the first turn.
        for arm in arms[number % len(arms):] + arms[:number % len(arms)]:
            use_settings(config_file, args.max_tokens, [*args.config, *ARMS[arm]])
            copy = await db(_copy_conversation)(conversation.pk)
            earlier = [row["answer"]]
            for turn, (question, fact) in enumerate(later, start=2):
                answer = await answer_in(user, copy, question)
                rows.append({**answer, "chain": number, "turn": turn, "arm": arm, "kind": chain["kind"],
                             "split": chain["split"], "fact": fact, "earlier": list(earlier)})
                earlier.append(answer["answer"])
        print(f"  chain {number + 1}/{len(chains)} ({chain['kind']}), {time.perf_counter() - started:.0f} s",
              flush=True)
        if args.out:  # after every chain: a run cut short keeps what it measured (--rescore reads it)
            args.out.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return rows


def _found(fact: str, texts: list[str]) -> bool:
    return any(re.search(fact, text, re.I) for text in texts)


def _shares(rows: list[dict]) -> str:
    n = max(1, len(rows))
    no_repeat = sum(not repeats(r["answer"], r["earlier"]) for r in rows)
    primed = sum(_found(r["fact"], r["memory_texts"]) for r in rows)
    grounded = sum(_found(r["fact"], [r["answer"]]) for r in rows)
    portal = sum(r.get("grounding_word") == "grounded" for r in rows)
    ttft = percentile([r["ttft"] for r in rows if r["ttft"] is not None], 0.5)
    prompt = percentile([r["prompt_tokens"] for r in rows], 0.5)
    return (f"n={len(rows):<3} no repeat {no_repeat / n:6.1%}  fact primed {primed / n:6.1%}  "
            f"grounded {grounded / n:6.1%}  portal 'grounded' {portal / n:6.1%}  "
            f"TTFT p50 {ttft:5.2f} s  prompt p50 {prompt:5.0f} tok")


def chain_report(rows: list[dict]) -> None:
    """The figures per arm and kind, the first questions beside them, and the pairs against today's."""
    firsts = [r for r in rows if r["turn"] == 1]
    for kind in ("unrelated", "follow-up"):
        print(f"\n{kind} chains, first questions (one answer, every arm): "
              f"{_shares([r for r in firsts if r['kind'] == kind])}")
        for arm in dict.fromkeys(r["arm"] for r in rows if r["turn"] > 1):
            mine = [r for r in rows if r["turn"] > 1 and r["kind"] == kind and r["arm"] == arm]
            print(f"  {arm:<12} 2nd/3rd: {_shares(mine)}")
            if arm == REFERENCE:
                continue
            today = {(r["chain"], r["turn"]): r for r in rows if r["arm"] == REFERENCE}
            pairs = [(_found(r["fact"], [r["answer"]]),
                      _found(r["fact"], [today[(r["chain"], r["turn"])]["answer"]])) for r in mine]
            only_arm, only_today = sum(a and not b for a, b in pairs), sum(b and not a for a, b in pairs)
            print(f"  {'':<12} paired against {REFERENCE}: grounded in {arm} only {only_arm}, in {REFERENCE} "
                  f"only {only_today}; sign test p = {sign_test(only_arm, only_today):.3f}")


def show_answers(rows: list[dict], count: int) -> None:
    """The first `count` chains' answers, every arm, with whether each repeats an earlier one."""
    for row in [r for r in rows if r["chain"] < count]:
        mark = "REPEATS" if row["turn"] > 1 and repeats(row["answer"], row["earlier"]) else ""
        print(f"\n[chain {row['chain'] + 1} turn {row['turn']} {row['arm'] or 'first'}] Q: {row['question']} "
              f"{mark}\nsources: {row.get('memory_sources', [])[:4]}\nA: {row['answer'][:400]}")
