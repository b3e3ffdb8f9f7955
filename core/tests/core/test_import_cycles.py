"""No module of the core, and none of any in-house plugin, imports another in a cycle (lazy
imports inside functions count: they hide the cycle, not remove it); a plugin imports no
other plugin. Imports under ``if TYPE_CHECKING:`` are ignored (they never run)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
PACKAGES = {"epoxy": REPO / "core" / "src"} | {
    src.name: src.parent for src in sorted((REPO / "plugins").glob("*/src/epoxy_ep_*")) if src.is_dir()}


def _modules(top: str, root: Path) -> dict[str, Path]:
    found = {}
    for path in (root / top).rglob("*.py"):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    hidden: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            hidden.update(id(n) for n in ast.walk(node))
    return hidden


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of ``modules`` that ``module`` imports, anywhere in its code."""
    tree = ast.parse(path.read_text())
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    hidden = _type_checking_nodes(tree)
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in hidden:
            continue
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                target = ".".join(base[: len(base) - node.level + 1] + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                name = f"{target}.{alias.name}"
                found.add(name if name in modules else target)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {m for m in found if m in modules and m != module}


def cycles(modules: dict[str, Path]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    edges = {m: imports_of(m, p, modules) for m, p in modules.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in modules:
        if module not in index:
            visit(module)
    return found


@pytest.mark.parametrize("top", sorted(PACKAGES))
def test_no_import_cycles(top):
    assert cycles(_modules(top, PACKAGES[top])) == []


def test_the_check_finds_a_cycle(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "a.py").write_text("def f():\n    from .b import g\n")
    (tmp_path / "pkg" / "b.py").write_text("from .a import f\n")
    (tmp_path / "pkg" / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import f\n"
    )
    assert cycles(_modules("pkg", tmp_path)) == [["pkg.a", "pkg.b"]]


@pytest.mark.parametrize("top", sorted(t for t in PACKAGES if t != "epoxy"))
def test_a_plugin_imports_no_other_plugin(top):
    others = tuple(t for t in PACKAGES if t not in ("epoxy", top))
    for path in (PACKAGES[top] / top).rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = ([node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level
                     else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            bad = [n for n in names if n.split(".")[0] in others]
            assert not bad, f"{path.relative_to(REPO)} imports {bad}"
