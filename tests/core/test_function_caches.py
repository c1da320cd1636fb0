"""`core.runtime.reset()` forgets every cache of the process: each `functools.cache` or `lru_cache` of
the product code is registered with `core.cache.function_cache_register`, or, in the engine (which
imports nothing above it), emptied by its module's `clear_caches`, which `reset()` calls."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

from core import cache as core_cache
from core import runtime

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("accounts", "api", "chat", "core", "corpus", "engine", "hdrag_site", "memory")
FUNCTOOLS_CACHES = {"functools.cache", "functools.lru_cache", "cache", "lru_cache"}


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Call):
        return _dotted(node.func)
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return node.id if isinstance(node, ast.Name) else ""


def _cached_functions() -> list[tuple[str, str]]:
    """(module, function) of every module-level function of the product memoised by functools."""
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            for node in ast.parse(path.read_text()).body:
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and any(
                        _dotted(decorator) in FUNCTOOLS_CACHES for decorator in node.decorator_list):
                    found.append((module, node.name))
    return found


def _cleared_by_clear_caches(module: str) -> set[str]:
    tree = ast.parse((ROOT / Path(*module.split("."))).with_suffix(".py").read_text())
    clear = next(node for node in tree.body
                 if isinstance(node, ast.FunctionDef) and node.name == "clear_caches")
    return {_dotted(node.func).removesuffix(".cache_clear") for node in ast.walk(clear)
            if isinstance(node, ast.Call) and _dotted(node.func).endswith(".cache_clear")}


def test_every_functools_cache_of_the_product_is_emptied_by_reset():
    found = _cached_functions()
    assert ("core.runtime", "engine_config") in found and ("engine.vocab", "_shared") in found
    unregistered = []
    for module, name in found:
        function = getattr(importlib.import_module(module), name)
        if module.startswith("engine."):
            if name not in _cleared_by_clear_caches(module):
                unregistered.append(f"{module}.{name}: not in its module's clear_caches()")
        elif function not in core_cache._function_caches:
            unregistered.append(f"{module}.{name}: no @function_cache_register")
    assert unregistered == [], "\n".join(unregistered)
    engine_modules = {module for module, _ in found if module.startswith("engine.")}
    reset_source = ast.unparse(next(node for node in ast.parse(Path(runtime.__file__).read_text()).body
                                    if isinstance(node, ast.FunctionDef) and node.name == "reset"))
    assert all(f"from {module} import clear_caches" in reset_source for module in engine_modules)


def test_reset_empties_a_registered_function_cache():
    from core.bodylimit import _upload_paths

    _upload_paths("^/upload/")
    assert _upload_paths.cache_info().currsize >= 1
    runtime.reset()
    assert _upload_paths.cache_info().currsize == 0
