"""The provider's options, declared once as an ``epoxy.kit.OptionTable``: ``options()`` shows
``TABLE.describe()`` (``epoxy providers --options example``) and ``create`` parses with
``TABLE.parse``, so what users see and what is accepted never disagree. Unknown names and
bad values raise ``epoxy.errors.InvalidArgumentError`` naming the known options.

Users pass them as ``providers=[("example", {"ops": "Relu,Add"})]``; strings work for every
kind (onnxruntime-style options, the conformance kit's ``--epoxy-provider-option``).
Add a row per option (kinds: bool, int, float, enum, str, path, list, dict) and a field of
the same name and default to ``ExampleOptions``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from epoxy.kit import Option, OptionTable


@dataclass(frozen=True)
class ExampleOptions:
    """Validated options (the table checks the fields match its rows)."""

    ops: frozenset[str] | None = None  # None: every op the provider supports


TABLE: OptionTable[ExampleOptions] = OptionTable("example", [
    Option("ops", "list", None, "op types this provider may take, e.g. 'Relu,Add'",
           default_text="every op it supports", convert=frozenset),
], ExampleOptions)


def parse_options(options: Mapping[str, Any]) -> ExampleOptions:
    return TABLE.parse(options)
