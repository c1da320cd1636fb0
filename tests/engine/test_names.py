"""Names that say what they hold (issue 30.12): a loaded build or state of segments is a
`LoadedIndex`; the module that finds and assembles model files is `engine.model_files` (the old
`engine.models` read as database models)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import typing
from pathlib import Path

import engine.loaded_build
import engine.segments

ROOT = Path(__file__).resolve().parents[2]


def test_a_loaded_build_and_a_state_are_a_loaded_index():
    assert typing.get_type_hints(engine.loaded_build.load_corpus)["return"] is engine.loaded_build.LoadedIndex
    assert typing.get_type_hints(engine.segments.load_state)["return"] is engine.loaded_build.LoadedIndex
    assert not hasattr(engine.loaded_build, "LoadedCorpus")


def test_model_files_is_the_module_and_its_old_name_is_gone():
    assert importlib.util.find_spec("engine.model_files") is not None
    assert importlib.util.find_spec("engine.models") is None


def test_the_command_the_portal_script_runs_names_the_model_files_module():
    """`./portal run` asks `python -m engine.model_files chat` for the chat model; a wrong role
    gets the usage, under the module's own name."""
    usage = subprocess.run([sys.executable, "-m", "engine.model_files", "no-such-role"], cwd=ROOT,
                           capture_output=True, text=True, timeout=60)
    assert usage.returncode == 1
    assert usage.stderr.strip() == "usage: python -m engine.model_files [chat|chat-packaged|embeddings]"
