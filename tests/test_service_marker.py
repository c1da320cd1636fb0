"""The `service` marker is on every test that needs a service, so that the fast tier
(`-m "not service"`) runs without one: tests/plugins/tiers.py gives it by fixture, and what that
cannot see (a test or a fixture that starts a service itself) is found here in the source."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

from tests.plugins.tiers import (
    BROWSER_TESTS,
    COLLECTED,
    COLLECTED_FILE_VARIABLE,
    SERVICE_FIXTURES,
    Collected,
    collected_read,
)

AUDIT = Path(__file__).resolve()
TESTS = AUDIT.parent
# Calls that start (or connect to) a service: llama.cpp, a Chroma server, the gateway, Chromium, a
# Celery worker on Redis, PostgreSQL, Redis.
STARTERS = frozenset({"LlamaServer", "ChromaServer", "running_gateway", "sync_playwright", "celery_worker",
                      "psycopg.connect", "redis.Redis", "redis.Redis.from_url"})


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def _walk_outside_raises(node: ast.AST) -> Iterator[ast.AST]:
    """`node`'s subtree without the bodies of `with pytest.raises(...)`: what is expected to fail
    before it starts anything does not start it."""
    yield node
    if isinstance(node, ast.With) and any(isinstance(item.context_expr, ast.Call)
                                          and _dotted(item.context_expr.func) == "pytest.raises"
                                          for item in node.items):
        return
    for child in ast.iter_child_nodes(node):
        yield from _walk_outside_raises(child)


def _starts_directly(function: ast.AST) -> bool:
    for node in _walk_outside_raises(function):
        if isinstance(node, ast.Call):
            name = _dotted(node.func)
            if name in STARTERS:
                return True
            if (name.endswith(".getfixturevalue") and node.args and isinstance(node.args[0], ast.Constant)
                    and node.args[0].value in SERVICE_FIXTURES):
                return True
        # A server started in a child process: `python -m engine.llama_server`, code run there, Redis.
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and (
                node.value in ("engine.llama_server", "redis-server") or "LlamaServer(" in node.value):
            return True
    return False


def _calls(function: ast.AST) -> set[str]:
    return {node.func.id for node in ast.walk(function) if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)}


@cache
def _functions(path: str) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    tree = ast.parse(Path(path).read_text(), filename=path)
    return {node.name: node for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)}


@cache
def _starting(path: str) -> frozenset[str]:
    """The functions of the module at `path` that start a service, themselves or through the
    module's own helpers (a fixture is not called by name: a test that asks for one has it in its
    fixtures, which tests/plugins/tiers.py reads)."""
    functions = _functions(path)
    starting = {name for name, function in functions.items() if _starts_directly(function)}
    helpers = {name for name, function in functions.items() if _fixture_decorator(function) is None}
    while grown := {name for name, function in functions.items()
                    if name not in starting and _calls(function) & starting & helpers}:
        starting |= grown
    return frozenset(starting)


def _fixture_decorator(function: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.expr | None:
    for decorator in function.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        if _dotted(target) == "pytest.fixture":
            return decorator
    return None


def _params_marked_service(decorator: ast.expr) -> bool:
    """Whether the fixture's parameters carry the marker (`pytest.param(..., marks=pytest.mark.service)`)."""
    return any(isinstance(node, ast.keyword) and node.arg == "marks"
               and "pytest.mark.service" in ast.unparse(node.value) for node in ast.walk(decorator))


def _sources() -> list[Path]:
    """The suite's Python files, but this one: its own examples start services in strings."""
    return [path for path in sorted(TESTS.rglob("*.py"))
            if "node_modules" not in path.parts and path != AUDIT]


def _fixtures() -> list[tuple[str, str, ast.FunctionDef | ast.AsyncFunctionDef, ast.expr]]:
    """Every fixture defined under tests/: (name, file, function, decorator)."""
    return [(name, str(path), function, decorator) for path in _sources()
            for name, function in _functions(str(path)).items()
            if (decorator := _fixture_decorator(function)) is not None]


def _suite_collected(config: pytest.Config, tmp_path: Path) -> list[Collected]:
    """Every test of the suite as collected: this session's collection when it was the whole suite (the
    fast tier, `./portal test`), else one of its own in a child process."""
    collected = config.stash.get(COLLECTED, [])
    test_files = {str(path) for path in TESTS.rglob("test_*.py") if "node_modules" not in path.parts}
    if test_files <= {each.path for each in collected}:
        return collected
    target = tmp_path / "collected.json"
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.plugins.workers", "--collect-only",
                           "-q", "-n", "0", "-p", "no:cacheprovider", str(TESTS)],
                          cwd=TESTS.parent, env={**os.environ, COLLECTED_FILE_VARIABLE: str(target)},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return collected_read(target)


@pytest.fixture(scope="module")
def suite(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> list[Collected]:
    return _suite_collected(request.config, tmp_path_factory.mktemp("collected"))


def test_every_test_with_a_service_fixture_and_every_browser_test_is_marked(suite):
    assert len(suite) > 1000  # the whole suite, not a part of it
    needing = [each for each in suite if SERVICE_FIXTURES.intersection(each.fixtures)
               or Path(each.path).is_relative_to(BROWSER_TESTS)]
    assert len(needing) > 100
    assert [each.nodeid for each in needing if "service" not in each.marks] == []
    browser = [each for each in suite if Path(each.path).is_relative_to(BROWSER_TESTS)]
    assert browser and all("browser" in each.marks for each in browser)


def test_every_test_that_starts_a_service_itself_is_marked(suite):
    unmarked = [each.nodeid for each in suite if Path(each.path) != AUDIT
                and each.function in _starting(each.path) and "service" not in each.marks]
    assert unmarked == [], "\n".join(unmarked)


def test_every_fixture_that_starts_a_service_is_a_service_fixture():
    fixtures = _fixtures()
    assert {name for name, *_ in fixtures} >= SERVICE_FIXTURES, "a SERVICE_FIXTURES name that no fixture has"
    unlisted = [f"{name} ({Path(path).relative_to(TESTS.parent)})"
                for name, path, function, decorator in fixtures
                if name in _starting(path) and name not in SERVICE_FIXTURES
                # a fixture that asks for a service fixture is in its tests' fixture closure with it
                and not SERVICE_FIXTURES.intersection(argument.arg for argument in function.args.args)
                and not _params_marked_service(decorator)]
    assert unlisted == [], "\n".join(unlisted)


def test_the_source_check_finds_a_start_in_a_helper_and_not_one_that_is_expected_to_fail(tmp_path):
    module = tmp_path / "test_example.py"
    module.write_text(
        "import pytest\n"
        "def _server(path):\n    return LlamaServer(path).start()\n"
        "def test_through_a_helper(tmp_path):\n    _server(tmp_path)\n"
        "def test_a_refused_model(tmp_path):\n"
        "    with pytest.raises(LlamaServerError):\n        LlamaServer(tmp_path / 'absent.gguf')\n"
        "def test_the_shared_store(request):\n    request.getfixturevalue('chroma_server')\n"
        "def test_a_module_run():\n    run(['python', '-m', 'engine.llama_server'])\n"
        "def test_plain():\n    assert 1 + 1 == 2\n")
    assert _starting(str(module)) == {"_server", "test_through_a_helper", "test_the_shared_store",
                                      "test_a_module_run"}
