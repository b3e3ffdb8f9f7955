"""``epoxy providers``: what is installed, the other names (aliases, e.g. onnxruntime's
``CPUExecutionProvider``) each answers to, what it can drive here, the options each provider
takes (so users need not read plugin sources), and what failed to load (refused aliases too).

The default output names each provider's options on one line; ``--options [PROVIDER]``
prints them with their help (allowed values, default) instead. ``--check [PROVIDER]``
creates each provider on each of its devices and probes it (:mod:`.providers_check`),
exiting 1 when one is broken.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..errors import InvalidArgumentError
from ..options import CORE_PROVIDER_OPTIONS
from ..plugins import ProviderEntry, default_registry
from ._console import Console, console_for

#: how the core's own provider options are listed next to a provider's
ALL_PROVIDERS = "(all)"
USAGE = "providers=[(name, {option: value})]"


EXAMPLE = """example:
  epoxy providers                     # what is installed, its devices, failed plugins
  epoxy providers --options openvino  # one provider's options, allowed values, defaults
  epoxy providers --check --json      # create and probe each provider on each device"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--options", nargs="?", const="", default=None, metavar="PROVIDER",
                        help="show each provider's options with their help (or only PROVIDER's)")
    parser.add_argument("--check", nargs="?", const="", default=None, metavar="PROVIDER",
                        help="create each provider (or only PROVIDER) on each device and probe its capability; "
                             "exit 1 if any fails")


def describe(entry: ProviderEntry) -> dict[str, Any]:
    """One provider as ``--json`` shows it."""
    f = entry.factory
    devices = entry.devices()
    return {
        "name": f.name,
        # names sessions also accept for it; aliases_error: why its declared aliases were ignored
        "aliases": list(entry.aliases),
        "aliases_error": entry.aliases_error,
        "package": entry.distribution,
        "package_version": entry.distribution_version,
        "version": f.version,
        "vendor": f.vendor,
        "sdk_api": f.sdk_api,
        "priority": f.priority,
        "available": bool(devices),
        "unavailable_reason": entry.unavailable_reason,
        "devices": [
            {"label": d.label, "kind": d.kind, "name": d.name, "memory_bytes": d.memory_bytes} for d in devices
        ],
        # {} when the factory describes none; options_error says why when its options() broke
        "options": entry.options(),
        "options_error": entry.options_error,
    }


def collect(only: str | None = None) -> dict[str, Any]:
    """Everything the command shows; ``only``: just that provider, by name or alias (failed
    plugins still listed)."""
    registry = default_registry()
    entries = registry.entries()
    if only:
        entries = [e for e in entries if e is registry.resolve(only)]
        if not entries:
            raise InvalidArgumentError(f"unknown provider {only!r}; installed: {registry.describe_names()}")
    registry.policies()  # collected lazily: a plugin's bad policy registration is a failure to show here too
    failed = [
        {"plugin": x.plugin, "stage": x.stage, "reason": x.reason, "package": x.distribution} for x in registry.failures
    ]
    return {"providers": [describe(e) for e in entries], "core_options": dict(CORE_PROVIDER_OPTIONS),
            "failed_plugins": failed}


def option_rows(data: dict[str, Any]) -> list[list[str]]:
    """provider, option, help: each provider's options (or why they are unknown), then the
    options the core takes for every provider."""
    rows = []
    for p in data["providers"]:
        rows += [[p["name"], name, help_] for name, help_ in p["options"].items()]
        if p["options_error"]:
            rows.append([p["name"], "?", p["options_error"]])
    rows += [[ALL_PROVIDERS, name, f"{help_} [core]"] for name, help_ in data["core_options"].items()]
    return rows


def _names(p: dict[str, Any]) -> str:
    if p["options_error"]:
        return "? (see --options)"
    return ", ".join(p["options"]) or "-"


def option_names(data: dict[str, Any]) -> list[list[str]]:
    """provider, its option names on one line: the compact view of :func:`option_rows`."""
    rows = [[p["name"], _names(p)] for p in data["providers"]]
    return rows + [[ALL_PROVIDERS, ", ".join(data["core_options"])]]


def provider_rows(data: dict[str, Any]) -> list[list[object]]:
    rows: list[list[object]] = []
    for p in data["providers"]:
        devices = ", ".join(f"{d['label']} ({d['name']})" if d["name"] else d["label"] for d in p["devices"]) or "-"
        status = "available" if p["available"] else f"unavailable: {p['unavailable_reason']}"
        aliases = "? (see failed plugins)" if p["aliases_error"] else ", ".join(p["aliases"]) or "-"
        rows.append([p["name"], aliases, p["package"] or "-", p["version"], p["vendor"], p["sdk_api"], p["priority"],
                     devices, status])
    return rows


def failure_rows(data: dict[str, Any]) -> list[list[str]]:
    """plugin, package, stage, reason: plugins that failed, aliases refused (stage ``alias``),
    and providers whose ``aliases`` attribute was ignored as malformed."""
    rows = [[f["plugin"], f["package"] or "-", f["stage"], f["reason"]] for f in data["failed_plugins"]]
    return rows + [[p["name"], p["package"] or "-", "alias", p["aliases_error"]]
                   for p in data["providers"] if p["aliases_error"]]


def run_check(only: str | None, as_json: bool) -> int:
    """``--check``: a row per provider and device; 1 when any failed."""
    from . import providers_check

    registry = default_registry()
    entries = registry.entries()
    if only:
        entry = registry.resolve(only)
        failed = providers_check.load_failures(registry, [only])
        if entry is None and not failed:
            raise InvalidArgumentError(f"unknown provider {only!r}; installed: {registry.describe_names()}")
        rows = providers_check.check(registry, [entry] if entry else [], with_failures=False) + failed
    else:
        rows = providers_check.check(registry, entries)
    data = providers_check.as_json(rows)
    if as_json:
        print(json.dumps(data, indent=2))
    else:
        Console().table(["provider", "device", "status", "stage", "detail"], providers_check.as_rows(rows))
        broken = sum(r.failed for r in rows)
        print(f"\n{broken} failed" if broken else "\nall providers passed the check")
    return 0 if data["ok"] else 1


def run(args: argparse.Namespace) -> int:
    if args.check is not None:
        if args.options is not None:
            raise InvalidArgumentError("--check and --options do not combine")
        return run_check(args.check or None, args.json)
    data = collect(args.options or None)
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    out = console_for(args)
    if args.options is not None:
        out.line(f"options ({USAGE}):")
        out.table(["provider", "option", "help"], option_rows(data))
        return 0
    out.table(["provider", "aliases", "package", "version", "vendor", "sdk", "priority", "devices", "status"],
              provider_rows(data))
    out.line(f"\noptions ({USAGE}; help: epoxy providers --options [PROVIDER]):")
    out.table(["provider", "options"], option_names(data))
    failed = failure_rows(data)
    if failed:
        out.line("\nfailed plugins:", kind="warn")
        out.table(["plugin", "package", "stage", "reason"], failed)
    return 0
