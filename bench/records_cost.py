"""What a chat turn pays for the team lead's records: the quota read, the turn's record, the
Prometheus observations (and, per HTTP request, the metrics and audit middleware), against what a
turn already writes (its answer with its memories), on the portal's own database.

    python -m bench.records_cost [--turns 300] [--threads 1,4,8]

Each thread plays one person: `--turns` turns, each the baseline (`message_create_assistant`: the
answer and its two memories, as every turn stores) and, timed apart, the records added
(`turn_quota_check` with a limit set, so it reads the day's records; `turn_record_create`;
`chat_turn_observe`; `llm_answer_observe`). SQLite in a temporary DATA_DIR (the embedded default).
Printed per thread count: median ms a turn for each, the ratio, and that cost beside a turn's
time to first token (`bench.load`: 26-35 s at 8 users on 2 cores)."""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench._hw import print_hardware  # noqa: E402


def _setup() -> None:
    os.environ["DATA_DIR"] = tempfile.mkdtemp(prefix="hdrag-records-")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hdrag_site.settings")
    os.environ.pop("DATABASE_URL", None)
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def _person(number: int, turns: int, baseline: list[float], records: list[float]) -> None:
    from django.contrib.auth.models import User
    from django.db import connection

    from chat.services import conversation_create, message_create_assistant, message_create_user
    from chat.usage import turn_quota_check, turn_record_create
    from core.metrics import chat_turn_observe, llm_answer_observe
    from engine.llm.stream import Usage

    user = User.objects.create_user(f"person{number}-{time.monotonic_ns()}")
    conversation = conversation_create(user=user, corpus_ids=[])
    for _ in range(turns):
        message_create_user(conversation_id=conversation.pk, content="How do I read rows from a CSV file?")
        started = time.perf_counter()
        message = message_create_assistant(
            conversation_id=conversation.pk,
            content="Use csv.reader. " * 20,
            status="complete",
            usage=Usage(prompt_tokens=900, completion_tokens=120),
        )
        middle = time.perf_counter()
        turn_quota_check(user=user)
        chat_turn_observe(surface="chat", status="complete", first_token_seconds=1.5)
        llm_answer_observe(
            model="qwen", server="http://127.0.0.1:8081", outcome="answered", first_token_seconds=1.2
        )
        turn_record_create(user_id=None, conversation_id=conversation.pk, surface="chat", status="complete",
                           model="qwen", server="http://127.0.0.1:8081", usage=Usage(900, 120),
                           first_token_seconds=1.5, memories=2, grounding=0.8, message_id=message.pk)
        ended = time.perf_counter()
        baseline.append((middle - started) * 1000)
        records.append((ended - middle) * 1000)
    connection.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--threads", default="1,4,8")
    args = parser.parse_args()
    print_hardware()
    _setup()
    from django.conf import settings

    settings.QUOTA_QUESTIONS_PER_DAY = (
        10**6
    )  # a limit, so the quota read happens as it does for a team with quotas
    print(
        f"\n{'people':>6}  {'baseline ms/turn':>16}  {'records ms/turn':>15}  {'ratio':>6}  "
        f"{'of a 26 s TTFT':>14}"
    )
    for count in (int(value) for value in args.threads.split(",")):
        baseline: list[float] = []
        records: list[float] = []
        people = [
            threading.Thread(target=_person, args=(n, args.turns, baseline, records)) for n in range(count)
        ]
        for person in people:
            person.start()
        for person in people:
            person.join()
        base, added = statistics.median(baseline), statistics.median(records)
        print(f"{count:>6}  {base:>16.2f}  {added:>15.2f}  {added / base:>6.2f}  {added / 26000:>13.4%}")


if __name__ == "__main__":
    main()
