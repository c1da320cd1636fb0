"""Answer quality and speed through the real chat path, with memories and with the model alone.

    python -m bench.answers [--set demo|jargon|manpages|kernel] [--gguf CHAT.gguf] [--questions 52]
                            [--max-tokens 1024] [--budget 512] [--rounds 3] [--out ANSWERS.jsonl]
    python -m bench.answers --set jargon --rescore ANSWERS.jsonl   # the grounding report again, no model
    python -m bench.answers --set jargon --meaning --retrieval-only   # facts primed, meaning on and off
    python -m bench.answers --chains [--split dev|held-out|all] [--arms whole,lead]   # multi-turn, paired

What runs: a corpus built by the real build service into a temporary SQLite portal, one real
llama.cpp server on the chat model (default: the packaged instruction-tuned model), and
`chat.turns.run_turn` — the service the websocket consumer calls — for every question of the set,
once in a conversation over the corpus and once with memory off (the baseline: the model alone,
same path). Each question comes with a regular expression for the fact a right answer contains;
the bench checks first that every fact is in the corpus. Four sets, from different real sources, so
that no prompt or setting is tuned to one:

* `demo` (the acceptance set of issue 9): the demo corpus (`manage.py portal_bootstrap`'s Python
  documentation: language reference topics and standard-library docstrings) and the 52 questions of
  `bench/data/demo_questions.json`. About a third of its facts are common knowledge.
* `jargon`: the Jargon File as a user would upload it (Debian's `jargon-text`, the plain-text book,
  one dataset cut into the corpus's default chunks) and the 45 questions of
  `bench/data/jargon_questions.json` about entries drawn at random (seeded), written from their text.
* `manpages`: 57 Linux manual pages (Debian's `manpages` and `manpages-dev`: system calls, library
  functions, file formats and overview pages, a fixed list in `bench.data.manpages.ANSWER_PAGES`) as
  `man` shows them, saved one after the other into one plain-text dataset cut into the corpus's
  default chunks, and the 45 questions of `bench/data/manpages_questions.json`, each on a detail
  of one page (a flag, an errno, a default, a limit), written from the rendered text.
* `kernel`: 44 pages of the Linux kernel's own documentation (Debian's `linux-doc-6.1`: the sysctl
  references, administrator guides, memory-management, filesystem, networking, scheduler, block and
  power pages, a fixed list in `bench.data.kerneldocs.ANSWER_DOCS`), the reStructuredText as
  installed, saved one after the other into one plain-text dataset cut into the corpus's default
  chunks, and the 45 questions of `bench/data/kernel_questions.json`, each on a detail of one page
  (a sysctl default, a file name under /proc or /sys, a flag or option name, a limit, a unit).

Printed per mode: grounded-answer rate (the answer contains the fact), the share of answers that
stopped by themselves (finish reason "stop"), the share cut for repetition (it looped again after
the chat's continuation from the cut; how many answers began looping at all is printed beside it,
and how many restated the question, which the chat stores as a loop but which never looped),
retrieval recall (a primed memory contains the fact), the share that recite the memories (a
<memory> tag, or 25 consecutive words of a primed memory, in the answer), time to first token
p50/p95 and generation tokens/s. With `--rounds N` every question is asked N times in each mode:
the figures pool the rounds, and each round's lift and the lifts' mean and spread are printed first.
Targets (issue 9): >= 95 % stop by themselves, no loops, grounded with memories >= 60 % and at
least 25 points above the model alone.

Then, per mode, how the answers' grounding score (`engine.citations`, issue 29) separates those
the fact judge calls grounded from the others, for each channel (exact words, HDC, their mean) and
a few thresholds, each claim weighed by the model's certainty as the portal does (and the portal's
channel also without): ROC AUC, the share of each class at or above the *grounded* cut, and the
attribution's time per answer (`grounding_report`).

`--versus KEY=VALUE` (repeatable) compares two arms paired: arm A runs with the `--config`
settings, arm B with those and the `--versus` ones, and every question is asked in both modes of
both arms in turn, in one run, against one corpus and one server. Beside each arm's figures it
prints, per mode, the discordant answers (grounded in one arm only) and the exact two-sided sign
test on them: sampling moves one unpaired round's grounded rate by several points, so a change of
prompt or setting is judged on the questions it turns, not on two rates taken apart.

`--chains` is the multi-turn mode (`bench.answer_chains`): chains of three questions in one
conversation over the demo corpus, unrelated and follow-ups, each later turn under several history
policies (`engine.llm.history`), paired against today's whole exchanges in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gzip
import json
import math
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench._hw import print_hardware  # noqa: E402

DATA = REPO / "bench" / "data"
JARGON_TEXT = Path("/usr/share/doc/jargon-text/jargon.txt.gz")


def _setting(text: str) -> str:
    key, equals, _ = text.partition("=")
    if not equals or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return text


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", choices=tuple(SETS), default="demo", help="question set and its corpus")
    parser.add_argument(
        "--gguf", type=Path, help="chat model (default: the packaged instruction-tuned model)"
    )
    parser.add_argument("--questions", type=int, default=0, help="first N questions only (0: all)")
    # 1024, the cap of the answers issue 9 saw loop: a lower one (320 before) cuts answers with a code
    # example that end by themselves well before the portal's own cap (max_new_tokens, 4096), and
    # counts them as not stopping; a loop is still cut by the guard or this cap.
    parser.add_argument("--max-tokens", type=int, default=1024, help="longest answer in tokens")
    parser.add_argument(
        "--budget", type=int, default=0, help="memory tokens per answer (0: the conversation default)"
    )
    parser.add_argument("--temperature", type=float, default=None, help="default: the engine config's")
    parser.add_argument("--threads", type=int, default=2, help="llama.cpp compute threads")
    parser.add_argument("--show", type=int, default=3, help="print this many answers of each mode")
    parser.add_argument("--rounds", type=int, default=1,
                        help="ask every question this many times in each mode; figures and verdicts pool the "
                             "rounds, and each round's lift is printed (sampling moves one round's rates)")
    parser.add_argument(
        "--memories-only",
        action="store_true",
        help="ask with memories only (no model-alone answers: no lift, no verdicts); for a larger "
        "sample of the grounding score in the same time",
    )
    parser.add_argument("--meaning", action="store_true",
                        help="the corpus with the meaning channel (engine.meaning; not the demo set)")
    parser.add_argument(
        "--retrieval-only",
        action="store_true",
        help="no model: the share of questions whose fact is in a memory the search primes (the "
        "conversation's budget); with --meaning, also with the channel off, paired",
    )
    parser.add_argument("--out", type=Path, help="write every answer as JSONL here")
    parser.add_argument(
        "--rescore",
        type=Path,
        metavar="JSONL",
        help="no model: the grounding report of the answers an earlier --out wrote (text channels)",
    )
    parser.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        type=_setting,
        help="an engine setting for this run (YAML value), e.g. repeat_penalty=1.0; repeatable",
    )
    parser.add_argument("--versus", action="append", default=[], metavar="KEY=VALUE", type=_setting,
                        help="a second arm, paired: these settings over --config's; repeatable")
    parser.add_argument("--chains", action="store_true",
                        help="multi-turn: chains of three questions over the demo corpus, each later turn "
                             "under every --arms history policy, paired against today's "
                             "(bench.answer_chains)")
    parser.add_argument("--split", choices=("dev", "held-out", "all"), default="dev",
                        help="with --chains: which chains")
    parser.add_argument("--arms", default="whole,lead,questions,last",
                        help="with --chains: history policies to compare (bench.answer_chains.ARMS)")
    args = parser.parse_args()
    if args.chains and (args.set != "demo" or args.versus or args.meaning):
        parser.error("--chains runs on the demo set, without --versus or --meaning")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if args.meaning and args.set == "demo":
        parser.error(
            "--meaning: the demo corpus is built by portal_bootstrap; choose jargon, manpages or kernel"
        )
    return args


def write_config(config_file: Path, max_tokens: int, settings: list[str] = ()) -> None:
    """The engine YAML the portal reads (`HDRAG_CONFIG_FILE`): the answer cap and `settings`."""
    import yaml

    values = {"max_new_tokens": max_tokens}
    for setting in settings:
        key, _, value = setting.partition("=")
        values[key.strip()] = yaml.safe_load(value)
    config_file.write_text(yaml.safe_dump(values))


def use_settings(config_file: Path, max_tokens: int, settings: list[str]) -> None:
    """Switch the running portal to another arm's settings: rewrite its config file and drop the
    cached engine config, which every turn reads afresh (`core.runtime.engine_config`)."""
    from core import runtime

    write_config(config_file, max_tokens, settings)
    runtime.engine_config.cache_clear()
    runtime.engine_config()  # a bad setting fails here, before any answer


def portal_setup(data_dir: Path, base_url: str, max_tokens: int, settings: list[str] = ()) -> None:
    config_file = data_dir / "engine.yaml"
    write_config(config_file, max_tokens, settings)
    os.environ.update(
        {
            "DJANGO_SETTINGS_MODULE": "hdrag_site.settings",
            "DATA_DIR": str(data_dir),
            "LLM_BASE_URL": base_url,
            "HDRAG_CONFIG_FILE": str(config_file),
            "LOG_LEVEL": "WARNING",
            "CELERY_TASK_ALWAYS_EAGER": "1",
            "HDRAG_ADMIN_PASSWORD": "bench-only-password",
        }
    )
    os.environ.pop("DATABASE_URL", None)
    os.environ.pop("REDIS_URL", None)
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def demo_texts() -> list[str]:
    return list(_demo_texts())


@functools.cache  # 4 s a read (it imports the standard library's modules); the same all run long
def _demo_texts() -> tuple[str, ...]:
    from corpus.demo import pydoc_topics, stdlib_docstrings

    return tuple(record["text"] for record in (*pydoc_topics(), *stdlib_docstrings()))


def jargon_texts() -> list[str]:
    if not JARGON_TEXT.exists():
        raise SystemExit(f"{JARGON_TEXT} not found: apt-get install jargon-text")
    with gzip.open(JARGON_TEXT, "rt", encoding="utf-8") as handle:
        return [handle.read()]


def manpages_texts() -> list[str]:
    from bench.data.manpages import ManPagesMissing, answer_corpus_pages

    try:
        return answer_corpus_pages()
    except ManPagesMissing as error:
        raise SystemExit(str(error)) from None


def kernel_texts() -> list[str]:
    from bench.data.kerneldocs import KernelDocsMissing, answer_corpus_docs

    try:
        return answer_corpus_docs()
    except KernelDocsMissing as error:
        raise SystemExit(str(error)) from None


def demo_corpus() -> int:
    """The demo corpus as `./portal run` creates it (`portal_bootstrap`)."""
    from django.core.management import call_command

    from corpus.management.commands.portal_bootstrap import DEMO_NAME
    from corpus.models import Corpus

    call_command("portal_bootstrap", stdout=open(os.devnull, "w"))  # noqa: SIM115 - lives for the call
    return Corpus.objects.get(name=DEMO_NAME).pk


def text_corpus(name: str, file_name: str, text: str) -> int:
    """A corpus of one plain-text dataset, uploaded and built as a user would, with the corpus defaults."""
    from django.contrib.auth import get_user_model
    from django.core.files.base import ContentFile
    from django.core.management import call_command

    from corpus.services.builds import build_start
    from corpus.services.corpora import corpus_create, dataset_upload

    call_command("portal_bootstrap", "--no-demo", stdout=open(os.devnull, "w"))  # noqa: SIM115
    admin = get_user_model().objects.get(username="admin")
    corpus = corpus_create(owner=admin, name=name, meaning_channel=os.environ.get("BENCH_MEANING") == "1")
    dataset_upload(corpus=corpus, user=admin, uploaded_file=ContentFile(text.encode("utf-8"), name=file_name))
    build_start(corpus=corpus, user=admin)
    return corpus.pk


def jargon_corpus() -> int:
    """The Jargon File uploaded as one plain-text dataset."""
    return text_corpus("The Jargon File", "jargon.txt", jargon_texts()[0])


def manpages_corpus() -> int:
    """The manual pages saved one after the other, as `man` shows them, into one plain-text dataset."""
    return text_corpus("Linux manual pages", "manpages.txt", "\n".join(manpages_texts()))


def kernel_corpus() -> int:
    """The kernel documentation pages saved one after the other, as installed, into one plain-text dataset."""
    return text_corpus("Linux kernel documentation", "kerneldocs.txt", "\n".join(kernel_texts()))


SETS = {"demo": ("demo_questions.json", demo_texts, demo_corpus),
        "jargon": ("jargon_questions.json", jargon_texts, jargon_corpus),
        "manpages": ("manpages_questions.json", manpages_texts, manpages_corpus),
        "kernel": ("kernel_questions.json", kernel_texts, kernel_corpus)}


def build_corpus(make_corpus) -> tuple[object, int]:  # noqa: ANN001
    """(admin user, corpus id), built by the real build service (inline: eager Celery)."""
    from django.contrib.auth import get_user_model

    from corpus.models import Corpus

    started = time.perf_counter()
    corpus = Corpus.objects.select_related("active_build").get(pk=make_corpus())
    if corpus.active_build is None:
        raise SystemExit(f"the corpus {corpus.name!r} did not build; see the log")
    memories = corpus.active_build.memories.count()
    print(f"corpus {corpus.name!r} built in {time.perf_counter() - started:.1f} s: {memories} memories")
    return get_user_model().objects.get(username="admin"), corpus.pk


def check_facts(questions: list[tuple[str, str]], texts: list[str], source: str) -> None:
    missing = [q for q, fact in questions if not any(re.search(fact, text, re.I) for text in texts)]
    if missing:
        raise SystemExit(f"facts not in the corpus, fix bench/data/{source}: {missing}")


async def ask(user, corpus_id: int, question: str, *, use_memory: bool, budget: int,  # noqa: ANN001
              temperature: float | None) -> dict:
    from channels.db import database_sync_to_async

    from chat.services import conversation_create

    options = {"token_budget": budget} if budget else {}
    conversation = await database_sync_to_async(conversation_create)(
        user=user, corpus_ids=[corpus_id], use_memory=use_memory, temperature=temperature, **options)
    return await answer_in(user, conversation.pk, question, use_memory=use_memory)


async def answer_in(user, conversation_id: int, question: str, *,  # noqa: ANN001
                    use_memory: bool = True) -> dict:
    """One turn of `question` in the conversation, through `chat.turns.run_turn`, as a row."""
    from chat.turns import run_turn

    events: list[dict] = []

    async def emit(event: dict) -> None:
        events.append(event)

    result = await run_turn(conversation_id=conversation_id, user_id=user.pk, content=question, emit=emit)
    final = events[-1]
    memories = next((e["memories"] for e in events if e["type"] == "chat.memories"), [])
    usage = result.usage
    first, total = result.timings.first_token, result.timings.total
    rate = (usage.completion_tokens - 1) / (total - first) if usage and first and total > first else 0.0
    done = next((e for e in events if e["type"] == "chat.done"), {})
    return {
        "question": question,
        "memory": use_memory,
        "answer": result.content,
        "status": result.status,
        "grounding": done.get("grounding"),
        "grounding_word": done.get("grounding_word"),
        "citations": done.get("citations") or [],
        "memory_sources": [m.get("source") for m in memories],
        "finish_reason": (final.get("message") or {}).get("finish_reason", ""),
        "error": final.get("error", ""),
        "ttft": first,
        "tokens_per_s": rate,
        "prompt_tokens": usage.prompt_tokens if usage else 0,
        "completion_tokens": usage.completion_tokens if usage else 0,
        "began_looping": result.loops,
        "memory_texts": [m["excerpt"] for m in memories],
        "token_logprobs": [[start, end, round(logprob, 4)] for start, end, logprob in result.token_logprobs],
    }


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else float("nan")


MEMORY_TAG = re.compile(r"</?memory>", re.I)
RECITED_WORDS = 25


def recited(row: dict) -> bool:
    """The answer copies the prompt's framing (a <memory> tag) or RECITED_WORDS consecutive words of
    a primed memory: it recites the recollections instead of using them."""
    if MEMORY_TAG.search(row["answer"]):
        return True
    words = row["answer"].split()
    memories = [" " + " ".join(text.split()) + " " for text in row["memory_texts"]]
    return any(" " + " ".join(words[i:i + RECITED_WORDS]) + " " in memory
               for i in range(len(words) - RECITED_WORDS + 1) for memory in memories)


def grounded(row: dict, facts: dict[str, str]) -> bool:
    """The answer contains its question's fact."""
    return bool(re.search(facts[row["question"]], row["answer"], re.I))


def grounded_share(rows: list[dict], facts: dict[str, str]) -> float:
    return sum(grounded(r, facts) for r in rows) / len(rows)


def summary(name: str, rows: list[dict], facts: dict[str, str]) -> dict:
    n = len(rows)
    stopped = sum(r["finish_reason"] == "stop" for r in rows)
    # An answer that restated its question is stored as a loop is (status repetition, finish reason
    # "restated"), but it never looped: counted apart.
    restated = sum(r["finish_reason"] == "restated" for r in rows)
    loops = sum(r["status"] == "repetition" for r in rows) - restated
    began = sum(r.get("began_looping", 0) > 0 for r in rows)
    errors = sum(r["status"] == "error" for r in rows)
    recalled = sum(any(re.search(facts[r["question"]], t, re.I) for t in r["memory_texts"]) for r in rows)
    ttfts = [r["ttft"] for r in rows if r["ttft"] is not None]
    figures = {
        "grounded": grounded_share(rows, facts),
        "stopped": stopped / n,
        "loops": loops / n,
        "errors": errors / n,
        "recited": sum(recited(r) for r in rows) / n,
        "recall": recalled / n,
        "ttft_p50": percentile(ttfts, 0.5),
        "ttft_p95": percentile(ttfts, 0.95),
        "tokens_per_s": statistics.median(r["tokens_per_s"] for r in rows),
        "prompt_tokens": statistics.median(r["prompt_tokens"] for r in rows),
        "completion_tokens": statistics.median(r["completion_tokens"] for r in rows),
    }
    print(
        f"{name:<16} n={n:<3} grounded {figures['grounded']:6.1%}  stopped by itself "
        f"{figures['stopped']:6.1%}  loops {figures['loops']:5.1%}  errors {figures['errors']:5.1%}  fact in "
        f"a memory {figures['recall']:6.1%}  "
        f"recited {figures['recited']:5.1%}  restated the question {restated}  began looping {began} "
        f"(recovered after the cut: {began - loops})\n"
        f"{'':<16} TTFT p50 {figures['ttft_p50']:5.2f} s  p95 {figures['ttft_p95']:5.2f} s  "
        f"{figures['tokens_per_s']:5.1f} tok/s  prompt {figures['prompt_tokens']:5.0f} tok  "
        f"answer {figures['completion_tokens']:4.0f} tok (medians)"
    )
    return figures


def roc_auc(scores: list[float], positive: list[bool]) -> float:
    """The chance that a positive scores above a negative (ties count half); nan without both."""
    pos = [s for s, p in zip(scores, positive, strict=True) if p]
    neg = [s for s, p in zip(scores, positive, strict=True) if not p]
    if not pos or not neg:
        return float("nan")
    wins = sum((a > b) + 0.5 * (a == b) for a in pos for b in neg)
    return wins / (len(pos) * len(neg))


# Channels and thresholds `grounding_report` compares; the portal's is chat.citations'.
CHANNEL_THRESHOLDS = {"words": (0.34, 0.5, 0.67), "subject window 10": (0.34, 0.5, 0.67),
                      "subject window 15": (0.34, 0.5, 0.67), "subject window 25": (0.34, 0.5, 0.67),
                      "hdc": (0.15, 0.25, 0.35), "words+hdc": (0.3, 0.4, 0.5)}


def text_scorers() -> dict:
    """The channels that read only the texts (no build needed)."""
    from engine.citations import SubjectWindowSupport, WordSupport

    return {"words": WordSupport(), **{f"subject window {w}": SubjectWindowSupport(w) for w in (10, 15, 25)}}


def channel_scorers(corpus_id: int) -> dict:
    """Every channel: the text ones and the HDC ones, with the corpus's build."""
    from corpus import serving
    from corpus.models import Corpus
    from engine.citations import HDCSupport, MeanSupport, WordSupport

    build = Corpus.objects.select_related("active_build").get(pk=corpus_id).active_build
    hdc = HDCSupport(
        serving.tokenizer_for(build.params.gguf_path), serving.loaded_build(build.build_dir).encoder
    )
    return {**text_scorers(), "hdc": hdc, "words+hdc": MeanSupport(WordSupport(), hdc)}


def grounding_report(rows: dict[str, list[dict]], facts: dict[str, str], scorers: dict) -> None:
    """How each channel's grounding score separates the answers the fact judge calls grounded from
    the others: ROC AUC, and the share of each class at or above the *grounded* cut. Answers with
    memories are scored against the memories that primed them; the model alone's against those the
    same question primed with memories (same round): does the answer agree with the corpus? An
    answer without a claim counts as grounding 0. Each claim is weighed by its certainty (the
    answer's token log-probabilities, as the portal does) where the answers have them; the portal's
    channel also without ("plain"). Also the attribution's time per answer."""
    from chat.citations import CITATION_THRESHOLD, SCORER
    from engine.citations import GROUNDED_FROM, attribute, grounding_word

    primed = {(r["question"], r["round"]): r["memory_texts"] for r in rows["with memories"]}
    with_tokens = sum(bool(r.get("token_logprobs")) for mode_rows in rows.values() for r in mode_rows)
    print(
        f"\ngrounding against the fact judge (portal: {SCORER.name}, threshold {CITATION_THRESHOLD}, weighed "
        f"by certainty; {with_tokens} of {sum(map(len, rows.values()))} answers have token "
        f"log-probabilities; 'grounded' cut {GROUNDED_FROM:.0%}):"
    )
    variants = [(name, threshold, True) for name, thresholds in CHANNEL_THRESHOLDS.items() if name in scorers
                for threshold in thresholds]
    if SCORER.name in scorers:
        variants.insert(0, (SCORER.name, CITATION_THRESHOLD, False))
    for mode, mode_rows in rows.items():
        judged = [grounded(r, facts) for r in mode_rows]
        for name, threshold, weighed in variants:
            scores, times = [], []
            for row in mode_rows:
                started = time.perf_counter()
                result = attribute(row["answer"], primed[(row["question"], row["round"])],
                                   scorer=scorers[name], threshold=threshold, question=row["question"],
                                   token_logprobs=row.get("token_logprobs", ()) if weighed else ())
                times.append(time.perf_counter() - started)
                scores.append(result.grounding or 0.0)
            above = [grounding_word(score) == "grounded" for score in scores]
            share = {flag: (sum(a for a, j in zip(above, judged, strict=True) if j == flag)
                            / max(1, sum(j == flag for j in judged))) for flag in (True, False)}
            print(
                f"  {mode:<14} {name:<17} {'' if weighed else 'plain'} threshold {threshold:4.2f}: "
                f"AUC {roc_auc(scores, judged):.3f}  "
                f"above the cut: judged grounded {share[True]:6.1%}, others {share[False]:6.1%}  "
                f"(n {sum(judged)}/{len(judged) - sum(judged)})  attribution p50 "
                f"{percentile(times, 0.5) * 1000:5.1f} ms"
                f", p95 {percentile(times, 0.95) * 1000:5.1f} ms"
            )


def sign_test(only_a: int, only_b: int) -> float:
    """Exact two-sided sign test (McNemar's exact test) on the discordant pairs: the chance of a
    split at least this uneven if either arm were as likely to win each."""
    n, k = only_a + only_b, min(only_a, only_b)
    if n == 0:
        return 1.0
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n)


def verdicts(alone: dict, primed: dict) -> None:
    lift = primed["grounded"] - alone["grounded"]
    ratio = primed["grounded"] / alone["grounded"] if alone["grounded"] else float("inf")
    print(f"baseline (model alone) grounded {alone['grounded']:.1%}; with memories {primed['grounded']:.1%}: "
          f"{lift * 100:+.1f} points, ratio {ratio:.2f}x")
    checks = [("stop by themselves >= 95 %", min(alone["stopped"], primed["stopped"]) >= 0.95),
              ("no repetition loops", alone["loops"] == 0 and primed["loops"] == 0),
              ("grounded with memories >= 60 %", primed["grounded"] >= 0.60),
              ("grounded lift >= 25 points", lift >= 0.25),
              ("TTFT p50 with memories <= 3 s", primed["ttft_p50"] <= 3.0)]
    for text, ok in checks:
        print(f"target: {text:<34} {'meets' if ok else 'MISSES'}")


def paired(rows: dict[tuple[str, str], list[dict]], facts: dict[str, str]) -> None:
    """Per mode, the answers grounded in one arm only (rows pair up by question and round)."""
    print("\npaired, arm A against arm B (same question, same round):")
    for mode in dict.fromkeys(mode for _, mode in rows):
        a, b = rows[("A", mode)], rows[("B", mode)]
        pairs = [(grounded(x, facts), grounded(y, facts)) for x, y in zip(a, b, strict=True)]
        only_a = sum(x and not y for x, y in pairs)
        only_b = sum(y and not x for x, y in pairs)
        print(
            f"  {mode:<14} grounded in A only {only_a:3}, in B only {only_b:3}, in both "
            f"{sum(x and y for x, y in pairs):3}"
            f" of {len(pairs)}; sign test p = {sign_test(only_a, only_b):.3f}"
        )


MODES = {"model alone": False, "with memories": True}


async def run(args: argparse.Namespace, user, corpus_id: int, questions: list[tuple[str, str]],  # noqa: ANN001
              config_file: Path) -> None:
    from channels.db import database_sync_to_async

    arms = {"A": args.config, "B": [*args.config, *args.versus]} if args.versus else {"": args.config}
    modes = {"with memories": True} if args.memories_only else MODES
    rows: dict[tuple[str, str], list[dict]] = {(arm, mode): [] for arm in arms for mode in modes}
    await ask(user, corpus_id, "Hello!", use_memory=False, budget=args.budget, temperature=args.temperature)
    started = time.perf_counter()
    for round_number in range(args.rounds):
        for number, (question, _) in enumerate(questions):
            # Alternate arms and modes question by question, so load on the machine touches all alike.
            for arm, settings in arms.items():
                if len(arms) > 1:
                    use_settings(config_file, args.max_tokens, settings)
                for mode, use_memory in modes.items():
                    row = await ask(user, corpus_id, question, use_memory=use_memory, budget=args.budget,
                                    temperature=args.temperature)
                    rows[(arm, mode)].append({**row, "round": round_number, "arm": arm})
            if (number + 1) % 10 == 0:
                print(f"  round {round_number + 1}: {number + 1}/{len(questions)} questions, "
                      f"{time.perf_counter() - started:.0f} s", flush=True)
    facts = dict(questions)
    for arm, settings in arms.items():
        print(f"\narm {arm}: settings {settings or 'the defaults'}" if arm else "")
        report(args, {mode: rows[(arm, mode)] for mode in modes}, facts)
        scorers = await database_sync_to_async(channel_scorers)(corpus_id)
        grounding_report({mode: rows[(arm, mode)] for mode in modes}, facts, scorers)
    if len(arms) > 1:
        paired(rows, facts)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as out:
            for arm_rows in rows.values():
                out.writelines(json.dumps(row) + "\n" for row in arm_rows)


def report(args: argparse.Namespace, rows: dict[str, list[dict]], facts: dict[str, str]) -> None:
    """One arm's figures: each round's lift, each mode's summary, a few answers, the targets (the
    lift and the targets need both modes)."""
    both = len(rows) == len(MODES)
    if args.rounds > 1 and both:
        lifts = []
        for round_number in range(args.rounds):
            shares = {mode: grounded_share([r for r in mode_rows if r["round"] == round_number], facts)
                      for mode, mode_rows in rows.items()}
            lifts.append(shares["with memories"] - shares["model alone"])
            loops = sum(r["status"] == "repetition" for mode_rows in rows.values() for r in mode_rows
                        if r["round"] == round_number)
            print(f"round {round_number + 1}: grounded alone {shares['model alone']:6.1%}, with memories "
                  f"{shares['with memories']:6.1%}, lift {lifts[-1] * 100:+5.1f}; loops {loops}")
        print(
            f"lift over {args.rounds} rounds: mean {statistics.mean(lifts) * 100:+.1f}, standard deviation "
            f"{statistics.stdev(lifts) * 100:.1f}, range {min(lifts) * 100:+.1f} .. {max(lifts) * 100:+.1f} "
            "points\n"
        )
    figures = {mode: summary(mode, mode_rows, facts) for mode, mode_rows in rows.items()}
    for mode, mode_rows in rows.items():
        for row in mode_rows[:args.show]:
            print(
                f"\n[{mode}] Q: {row['question']}\nA ({row['status']}, {row['finish_reason']}): "
                f"{row['answer'][:600]}"
            )
    print()
    if both:
        verdicts(figures["model alone"], figures["with memories"])


def retrieval_only(args: argparse.Namespace, user, corpus_id: int, questions: list[tuple[str, str]]) -> None:  # noqa: ANN001
    """The share of questions whose fact is in a memory a first chat turn would be primed with (the
    search at the conversation's budget), as built; with the meaning channel, also with it off
    (its rule set to "hdc" for the second pass), paired by question."""
    from chat.models import Conversation
    from corpus.models import Corpus, IndexBuild
    from memory.services import memories_search

    budget = args.budget or Conversation._meta.get_field("token_budget").default
    build = Corpus.objects.select_related("active_build").get(pk=corpus_id).active_build
    rule = (build.parameters.get("meaning_fusion") or {}).get("rule")
    passes = {"as built": None, **({"meaning off": "hdc"} if rule else {})}
    found: dict[str, list[bool]] = {}
    for name, override in passes.items():
        if override:
            IndexBuild.objects.filter(pk=build.pk).update(
                parameters={**build.parameters, "meaning_fusion": {"rule": override, "evidence": {}}})
        started = time.perf_counter()
        found[name] = [
            any(
                re.search(fact, r.memory.text, re.I)
                for r in memories_search(
                    user=user, corpus_ids=[corpus_id], query=question, token_budget=budget
                )
            )
            for question, fact in questions
        ]
        print(
            f"{name:<10} (meaning rule {override or rule}): fact in a primed memory "
            f"{sum(found[name])}/{len(questions)}"
            f" = {sum(found[name]) / len(questions):.1%}; "
            f"{(time.perf_counter() - started) / len(questions) * 1000:.0f} ms"
            f" a search; budget {budget} tokens"
        )
        missed = [question for (question, _), hit in zip(questions, found[name], strict=True) if not hit]
        for question in missed[:args.show]:
            print(f"  missed: {question}")
    if len(found) == 2:
        pairs = list(zip(found["as built"], found["meaning off"], strict=True))
        only_on, only_off = sum(a and not b for a, b in pairs), sum(b and not a for a, b in pairs)
        print(f"paired: found with meaning only {only_on}, without it only {only_off}; "
              f"sign test p = {sign_test(only_on, only_off):.3f}")


def main() -> int:
    args = _parse()
    print_hardware()
    if args.meaning:
        os.environ["BENCH_MEANING"] = "1"
    from engine.llama_server import LlamaServer
    from engine.model_files import default_chat_gguf_path

    source, texts, make_corpus = SETS[args.set]
    questions = [tuple(item) for item in json.loads((DATA / source).read_text(encoding="utf-8"))]
    questions = questions[:args.questions] if args.questions else questions
    if args.rescore:
        saved = [
            json.loads(line) for line in args.rescore.read_text(encoding="utf-8").splitlines() if line.strip()
        ]
        if args.chains:
            from bench.answer_chains import chain_report

            chain_report(saved)
            return 0
        for arm in dict.fromkeys(row.get("arm", "") for row in saved):
            print(f"\n{args.rescore} ({args.set}){f', arm {arm}' if arm else ''}:")
            grounding_report({mode: [r for r in saved if r.get("arm", "") == arm and r["memory"] == use]
                              for mode, use in MODES.items() if any(r["memory"] == use for r in saved)},
                             dict(questions), text_scorers())
        return 0
    check_facts(questions, texts(), source)
    if args.retrieval_only:
        with tempfile.TemporaryDirectory(prefix="bench-answers-") as data_dir:
            print(f"set {args.set}: {len(questions)} questions, retrieval only (no model)")
            portal_setup(Path(data_dir), "http://127.0.0.1:9", args.max_tokens, args.config)  # never asked
            user, corpus_id = build_corpus(make_corpus)
            retrieval_only(args, user, corpus_id, questions)
        return 0
    gguf = args.gguf or default_chat_gguf_path()
    with tempfile.TemporaryDirectory(prefix="bench-answers-") as data_dir, \
            LlamaServer(gguf, threads=args.threads, ctx_size=8192, parallel=1) as server:
        print(
            f"set {args.set}: chat model {gguf.name} on llama.cpp {server.base_url} ({args.threads} "
            f"threads); {len(questions)} questions, answers up to {args.max_tokens} tokens; settings "
            f"{args.config or 'the defaults'}"
            + (f", paired against {args.versus}" if args.versus else "")
        )
        portal_setup(Path(data_dir), server.base_url, args.max_tokens, args.config)
        user, corpus_id = build_corpus(make_corpus)
        if args.chains:
            asyncio.run(chains(args, user, corpus_id, Path(data_dir) / "engine.yaml"))
        else:
            asyncio.run(run(args, user, corpus_id, questions, Path(data_dir) / "engine.yaml"))
    return 0


async def chains(args: argparse.Namespace, user, corpus_id: int, config_file: Path) -> None:  # noqa: ANN001
    """The multi-turn mode (`bench.answer_chains`): run, report, and write the rows to `--out`."""
    from bench.answer_chains import chain_report, run_chains, show_answers

    await ask(user, corpus_id, "Hello!", use_memory=False, budget=args.budget, temperature=args.temperature)
    rows = await run_chains(args, user, corpus_id, config_file)  # written to --out chain by chain
    show_answers(rows, args.show)
    chain_report(rows)


if __name__ == "__main__":
    sys.exit(main())
