"""Turn the template files shipped in this package (``templates/``) into a provider package.

``templates/common`` holds what both styles share; ``templates/<style>`` adds the
provider module. Each ``*.tmpl`` file is a :class:`string.Template` (``${name}``
placeholders; the templates contain no other ``$``) and a ``PACKAGE`` path part becomes the
import package. They are package data, so the generator works from an installed wheel.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from string import Template
from typing import TYPE_CHECKING

from epoxy.contract import SDK_API_VERSION
from epoxy.version import __version__ as CORE_VERSION

from ..version import __version__ as SDK_VERSION
from .names import Names, ScaffoldError, names_for

if TYPE_CHECKING:  # importlib.resources.abc is 3.11+
    from importlib.resources.abc import Traversable

STYLES: dict[str, str] = {
    "kernels": "a kernel provider: numpy kernels in an epoxy.kit.KernelRegistry, run node by node",
    "compiler": "a compiling provider: elementwise ops claimed as fused groups, each compiled to one callable",
}
SUFFIX = ".tmpl"
PACKAGE_PART = "PACKAGE"


def compatible(version: str) -> str:
    """The range a package written now should accept: this minor series (``0.1.3`` ->
    ``>=0.1,<0.2``; ``1.4.0`` -> ``>=1.4,<2``)."""
    major, minor = (int(p) for p in version.split(".")[:2])
    upper = f"0.{minor + 1}" if major == 0 else str(major + 1)
    return f">={major}.{minor},<{upper}"


def variables(names: Names, style: str) -> dict[str, str]:
    """What the templates may refer to."""
    return {
        "name": names.name,
        "package": names.package,
        "distribution": names.distribution,
        "title": names.title,
        "style": style,
        "style_summary": STYLES[style],
        "sdk_api": SDK_API_VERSION,
        "core_requirement": f"epoxy-core{compatible(CORE_VERSION)}",
        "sdk_requirement": f"epoxy-sdk[conformance]{compatible(SDK_VERSION)}",
    }


def _walk(node: Traversable, parts: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Traversable]]:
    for child in sorted(node.iterdir(), key=lambda c: c.name):
        if child.is_dir():
            yield from _walk(child, (*parts, child.name))
        elif child.name.endswith(SUFFIX):
            yield (*parts, child.name[: -len(SUFFIX)]), child


def render(name: str, style: str = "kernels") -> dict[str, str]:
    """The package for provider ``name`` in ``style``: relative POSIX path -> file text."""
    if style not in STYLES:
        raise ScaffoldError(f"unknown provider style {style!r}; one of {sorted(STYLES)}")
    names = names_for(name)
    values = variables(names, style)
    root = resources.files(__package__).joinpath("templates")
    files: dict[str, str] = {}
    for layer in ("common", style):
        for parts, source in _walk(root.joinpath(layer)):
            path = "/".join(names.package if p == PACKAGE_PART else p for p in parts)
            try:
                files[path] = Template(source.read_text(encoding="utf-8")).substitute(values)
            except (KeyError, ValueError) as exc:  # a template bug, not the user's
                raise RuntimeError(f"scaffold template {layer}/{'/'.join(parts)}: bad placeholder {exc}") from exc
    return dict(sorted(files.items()))


def default_folder(name: str) -> Path:
    return Path(names_for(name).folder)


def new_provider(name: str, style: str = "kernels", directory: str | os.PathLike[str] | None = None) -> Path:
    """Write the package for ``name`` into ``directory`` (default ``./ep-<name>``), which must
    not exist or be empty; return it. Written in a sibling temporary folder and moved into
    place, so a failure leaves nothing half-written."""
    files = render(name, style)
    target = Path(directory) if directory is not None else default_folder(name)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise ScaffoldError(f"{target} already exists and is not an empty folder; not overwriting it")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        for relative, text in files.items():
            path = staging.joinpath(*relative.split("/"))
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        if target.exists():
            target.rmdir()  # empty, checked above
        staging.rename(target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return target
