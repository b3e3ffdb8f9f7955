"""The provider contract's version, ``major.minor``, and the rule for which providers load.

A provider declares the version it was written against as a literal (``sdk_api = "1.0"``),
never by importing the core's constant: then the check below means something. A minor
release of the contract only adds (fields, optional hooks, helpers), so a provider built
for ``1.x`` loads on a core implementing ``1.y`` with ``y >= x``. A provider asking for a
newer minor than the core has may use what this core lacks; another major changed what
exists. Both are refused with the reason (a plugin failure, never a crash), as JAX refuses
a PJRT plugin built for another API.

History: ``1.0`` the first wave's contract (the int ``1`` still means ``1.0``); ``1.1`` adds
``GraphSpec.node_inputs`` to the Protocol, output checks, and the shared helpers of
``epoxy.kit`` (``convex_groups``, ``boundary``, ``OptionTable``, ``passes``); ``1.2`` adds
ahead-of-time compiled groups (``CompiledArtifact``, the optional ``Provider.export_compiled`` /
``import_compiled`` and ``ProviderFactory.compile_devices``, ``errors.ArtifactRefused``); ``1.3``
adds the ``epoxy_register_policies`` hook (provider selection policies) and the device
properties ``vendor``, ``device_type`` and ``hardware_id`` that ``epoxy.get_devices()`` reads;
``1.4`` adds the optional kernel attribute ``released_inputs`` (``contract.RELEASED_INPUTS``:
constants a kernel keeps its own copy of, which the session may then drop); ``1.5`` the optional
kernel attribute ``out_parts`` (``contract.OUT_PARTS``: where a kernel's inputs lie in its
output, so their producers write there: a concatenation that copies nothing).
"""

from __future__ import annotations

import re
from typing import Any

#: the contract this core implements
SDK_API = "1.5"

_FORM = re.compile(r"^\s*(\d+)\.(\d+)\s*$")


def parse(declared: Any) -> tuple[int, int]:
    """``"1.2"`` -> ``(1, 2)``; the int ``1`` (SDK API 1 before minors existed) -> ``(1, 0)``.
    Anything else is a ``ValueError`` saying what the form is."""
    if isinstance(declared, int) and not isinstance(declared, bool) and declared >= 0:
        return declared, 0
    match = _FORM.match(declared) if isinstance(declared, str) else None
    if match is None:
        raise ValueError(f"sdk_api must be a 'MAJOR.MINOR' string such as {SDK_API!r}, got {declared!r}")
    return int(match.group(1)), int(match.group(2))


def incompatibility(declared: Any, implemented: str | None = None) -> str | None:
    """Why a provider declaring ``declared`` cannot load on a core implementing
    ``implemented`` (default: this core's :data:`SDK_API`); ``None`` when it can."""
    implemented = SDK_API if implemented is None else implemented
    try:
        major, minor = parse(declared)
    except ValueError as exc:
        return str(exc)
    core_major, core_minor = parse(implemented)
    if major != core_major:
        return (f"targets epoxy SDK API {major}.{minor}, this epoxy-core implements {implemented} "
                f"(another major version: install a provider release built for {core_major}.x)")
    if minor > core_minor:
        return (f"targets epoxy SDK API {major}.{minor}, newer than the {implemented} this epoxy-core "
                f"implements: upgrade epoxy-core (a {major}.{minor} provider may use what {implemented} lacks)")
    return None
