"""Upgrade in place: a portal made by the previous release (tests/fixtures/upgrade/: its SQLite
database and its files) is migrated by the current code, then shows the same users, conversation,
citations and token, answers the same searches, checks clean, chats on the real llama.cpp through
the API with its old token, and appends a new upload."""

from __future__ import annotations

import json
import tarfile

import pytest
import yaml

from tests.corpus.portal_process import REPO, Portal

FIXTURES = REPO / "tests" / "fixtures" / "upgrade"


def _top_results(state: dict) -> dict:
    return {name: {query: [r[0] for r in results[:3]] for query, results in corpus["searches"].items()}
            for name, corpus in state["corpora"].items()}


@pytest.mark.service
@pytest.mark.parametrize("release", sorted(p.name.removesuffix(".tar.xz") for p in FIXTURES.glob("*.tar.xz")))
def test_a_portal_of_an_earlier_release_upgrades_in_place(release, tmp_path, llama_server):
    recorded = json.loads((FIXTURES / f"{release}.json").read_text())
    data_dir = tmp_path / "data"
    with tarfile.open(FIXTURES / f"{release}.tar.xz") as archive:
        archive.extractall(data_dir, filter="data")
    portal = Portal(data_dir)
    config = tmp_path / "engine.yaml"
    config.write_text(yaml.safe_dump({"max_new_tokens": 48, "temperature": 0.0, "top_p": 1.0}))
    portal.env.update(
        LLM_BASE_URL=llama_server.base_url, HDRAG_CONFIG_FILE=str(config), LLM_TIMEOUT_SECONDS="120"
    )

    portal.manage("migrate", "--noinput")
    state = portal.scenario("state", recorded["token"])
    before = recorded["state"]
    assert state["token_user"] == "owner"
    assert state["users"] == before["users"] and state["conversations"] == before["conversations"]
    for name, corpus in before["corpora"].items():
        assert {k: v for k, v in state["corpora"][name].items() if k != "searches"} == \
               {k: v for k, v in corpus.items() if k != "searches"}
    assert _top_results(state) == _top_results(before)
    assert "agree" in portal.manage("check_restore").stdout

    chatted = portal.scenario("chat", recorded["token"])
    assert chatted["status"] == 201 and chatted["turn"] == "complete" and chatted["answer"].strip()
    assert chatted["memories"] and chatted["messages"] == 4

    appended = portal.scenario("append")
    assert appended["job"] == [3, "append", "succeeded"] and appended["serving"] == 3
    assert appended["found"][0].startswith("Glaciers carve")
