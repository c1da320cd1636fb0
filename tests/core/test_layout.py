"""The layout of docs/ARCHITECTURE.md, checked from the code: every product module's imports (module
level and inside functions) and the dotted module paths in settings, read with `ast`.

Rules: the roof (`hdrag_site`) is imported by no product package; the ground (`core`) imports no
app; the engine imports nothing above it; apps import one way, api → chat → memory → corpus →
accounts → core → engine; no package imports another's private module (a name starting with `_`);
every dotted path in settings names a module of the tree or an installed library; no ground module
reads a setting whose value names an app's module (that would be an import no import line shows).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ROOF = "hdrag_site"
# Higher imports lower, never the other way; the roof stands above all and is imported by none.
RANKS = {"api": 6, "chat": 5, "memory": 4, "corpus": 3, "accounts": 2, "core": 1, "engine": 0}
APPS = {"api", "chat", "memory", "corpus", "accounts"}
PRODUCT = (*RANKS, ROOF)
SETTINGS = "hdrag_site/settings.py"


@dataclass(frozen=True)
class Edge:
    source: str  # the importing module, dotted
    target: str  # the imported module (or module.name), dotted
    line: int
    how: str  # "import" or "setting NAME"

    def __str__(self) -> str:
        return f"{self.source}:{self.line} -> {self.target} ({self.how})"


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def product_files(root: Path) -> list[Path]:
    return sorted(
        p for package in PRODUCT if (root / package).is_dir() for p in (root / package).rglob("*.py")
    )


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def import_edges(path: Path, root: Path) -> list[Edge]:
    """Every import in the file, wherever it stands (module level, functions, `if TYPE_CHECKING`)."""
    module = module_name(path, root)
    edges = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            edges += [Edge(module, alias.name, node.lineno, "import") for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, path.name == "__init__.py", node)
            edges += [Edge(module, f"{target}.{alias.name}", node.lineno, "import") for alias in node.names]
    return edges


def _strings(node: ast.AST) -> list[str]:
    return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def setting_paths(settings_file: Path, root: Path) -> dict[str, list[Edge]]:
    """Settings (by name) whose values hold dotted paths into the product packages
    (MIDDLEWARE, AXES_HANDLER, REST_FRAMEWORK's classes, CELERY_*, ASGI_APPLICATION, ...)."""
    source = module_name(settings_file, root)
    found: dict[str, list[Edge]] = {}
    for node in ast.parse(settings_file.read_text()).body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [t.id for t in targets if isinstance(t, ast.Name)]
            for name in names:
                for text in _strings(node.value):
                    if "." in text and " " not in text and text.split(".")[0] in PRODUCT and text.isascii():
                        found.setdefault(name, []).append(Edge(source, text, node.lineno, f"setting {name}"))
    return found


def settings_read(path: Path) -> list[tuple[str, int]]:
    """`settings.NAME` reads in a file, with their lines."""
    return [(n.attr, n.lineno) for n in ast.walk(ast.parse(path.read_text()))
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "settings"]


def _package(dotted: str) -> str:
    return dotted.split(".")[0]


def _private_part(dotted: str) -> str | None:
    return next(
        (part for part in dotted.split(".")[1:] if part.startswith("_") and not part.startswith("__")), None
    )


def edge_violations(edge: Edge) -> list[str]:
    source, target = _package(edge.source), _package(edge.target)
    if target not in PRODUCT or source == target:
        return []
    found = []
    if target == ROOF:
        found.append(f"the roof is imported by {source}: {edge}")
    elif source != ROOF and RANKS[source] <= RANKS[target]:
        kind = (
            "the ground imports an app"
            if source == "core"
            else (
                "the engine imports what stands above it"
                if source == "engine"
                else "an import against the app order"
            )
        )
        found.append(f"{kind}: {edge}")
    if _private_part(edge.target):
        found.append(f"{source} imports {target}'s private {_private_part(edge.target)}: {edge}")
    return found


def _defines(path: Path, name: str) -> bool:
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and node.name == name:
            return True
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return True
        if isinstance(node, ast.Import | ast.ImportFrom) and any(
                (alias.asname or alias.name).split(".")[0] == name for alias in node.names):
            return True
    return False


def _exists(dotted: str, root: Path) -> bool:
    """A dotted path names a module of the tree, or a name a module of the tree defines."""
    parts = dotted.split(".")
    module = root.joinpath(*parts)
    if module.with_suffix(".py").is_file() or (module / "__init__.py").is_file():
        return True
    parent = root.joinpath(*parts[:-1])
    for path in (parent.with_suffix(".py"), parent / "__init__.py"):
        if path.is_file():
            return _defines(path, parts[-1])
    return False


def layout_violations(root: Path) -> list[str]:
    found = []
    for path in product_files(root):
        for edge in import_edges(path, root):
            found += edge_violations(edge)
    settings_file = root / SETTINGS
    if settings_file.is_file():
        paths = setting_paths(settings_file, root)
        for edges in paths.values():
            found += [
                f"a setting names no module of the tree: {e}" for e in edges if not _exists(e.target, root)
            ]
        naming_apps = {name: edges for name, edges in paths.items()
                       if any(_package(e.target) in APPS for e in edges)}
        for path in product_files(root):
            module = module_name(path, root)
            if _package(module) not in ("core", "engine"):
                continue
            for name, line in settings_read(path):
                if name in naming_apps:
                    found.append(f"the ground reads {name}, which names an app's module "
                                 f"({naming_apps[name][0].target}): {module}:{line}")
    return found


def test_the_code_keeps_the_layout():
    assert layout_violations(ROOT) == []


def test_every_product_package_is_walked():
    modules = {module_name(p, ROOT) for p in product_files(ROOT)}
    assert {"core.bodylimit", "corpus.serving", "chat.llm.queue", "accounts.throttle", "engine.llm",
            "hdrag_site.settings"} <= modules
    assert (
        setting_paths(ROOT / SETTINGS, ROOT)["AXES_HANDLER"][0].target
        == "accounts.throttle.AddressLimitHandler"
    )


def _plant(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        for parent in path.relative_to(root).parents:
            if parent != Path(".") and not (root / parent / "__init__.py").exists():
                (root / parent / "__init__.py").write_text("")


def test_the_walk_finds_each_kind_of_violation(tmp_path):
    """A small tree with one violation of each rule, imports inside functions and relative ones
    included: the walk names every one, so a passing walk of the real tree means something."""
    _plant(tmp_path, {
        "core/guard.py": "def check():\n    from corpus import models\n",
        "corpus/views.py": "from hdrag_site import urls\nfrom chat.turns import run_turn\n",
        "chat/turns.py": "from memory._private import helper\nfrom . import consumers\n",
        "chat/consumers.py": "",
        "memory/_private.py": "",
        "engine/llm.py": "import core.errors\n",
        "hdrag_site/urls.py": "from api import views\n",
        "hdrag_site/settings.py": ('MIDDLEWARE = ["core.gone.Middleware"]\n'
                                   'CHECKS = ["api.authentication.check"]\n'),
        "core/reads.py": "from django.conf import settings\nsettings.CHECKS\n",
    })
    found = "\n".join(layout_violations(tmp_path))
    for expected in (
        "the ground imports an app: core.guard:2 -> corpus.models",
        "the roof is imported by corpus: corpus.views:1 -> hdrag_site.urls",
        "an import against the app order: corpus.views:2 -> chat.turns.run_turn",
        "chat imports memory's private _private: chat.turns:1 -> memory._private.helper",
        "the engine imports what stands above it: engine.llm:1 -> core.errors",
        "a setting names no module of the tree: hdrag_site.settings:1 -> core.gone.Middleware",
        "the ground reads CHECKS, which names an app's module (api.authentication.check): core.reads:2",
    ):
        assert expected in found
    assert "chat.consumers" not in found and "hdrag_site.urls:1 -> api" not in found  # allowed: own app, roof


def test_one_streaming_loop():
    """Every answer the portal streams (the chat turn, the conversations API, both OpenAI-compatible
    replies) goes through chat.llm.answer.turn_answer: no other product module calls the
    engine's stream_answer."""
    callers = set()
    for path in product_files(ROOT):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
                if name == "stream_answer" and _package(module_name(path, ROOT)) != "engine":
                    callers.add(module_name(path, ROOT))
    assert callers == {"chat.llm.answer"}
