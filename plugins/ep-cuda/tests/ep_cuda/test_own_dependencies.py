"""ep-cuda installs and works with only its declared dependencies: its code imports no other
plugin (ep-cpu included); the simulated device's registry finds a cpu provider, when one is
installed, through the entry points every session uses."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

import epoxy_ep_cuda

SOURCE = Path(epoxy_ep_cuda.__file__).parent


def _imported_modules(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return found


def test_no_module_imports_another_plugin() -> None:
    offending = {
        str(path.relative_to(SOURCE)): sorted(
            m
            for m in _imported_modules(path)
            if m.split(".")[0].startswith("epoxy_ep_") and m.split(".")[0] != "epoxy_ep_cuda"
        )
        for path in SOURCE.rglob("*.py")
    }
    assert not {k: v for k, v in offending.items() if v}


def test_fake_registry_without_ep_cpu_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    # as if ep-cpu were not installed: importing it fails
    for name in [m for m in sys.modules if m == "epoxy_ep_cpu" or m.startswith("epoxy_ep_cpu.")] + ["epoxy_ep_cpu"]:
        monkeypatch.setitem(sys.modules, name, None)
    from epoxy_ep_cuda.testing import fake_registry

    registry = fake_registry()
    assert registry.get("cuda") is not None
    assert registry.get("cpu") is None  # nothing installed to load (the import failure is recorded)
    assert fake_registry(with_cpu=False).get("cpu") is None


def test_fake_registry_loads_the_installed_cpu_provider() -> None:
    from importlib import metadata

    from epoxy_ep_cuda.testing import fake_registry

    if not [ep for ep in metadata.entry_points(group="epoxy.providers") if ep.name == "cpu"]:
        pytest.skip("no cpu provider installed")
    registry = fake_registry()
    assert registry.get("cpu") is not None and registry.get("cuda") is not None
