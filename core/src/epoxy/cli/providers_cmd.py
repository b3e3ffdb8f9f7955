"""``epoxy providers``: what is installed, what it can drive here, and what failed to load."""

from __future__ import annotations

import argparse
import json

from ..plugins import default_registry
from ._format import table


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def collect() -> dict[str, object]:
    registry = default_registry()
    providers = []
    for entry in registry.entries():
        f = entry.factory
        devices = entry.devices()
        providers.append({
            "name": f.name,
            "package": entry.distribution,
            "package_version": entry.distribution_version,
            "version": f.version,
            "vendor": f.vendor,
            "sdk_api": f.sdk_api,
            "priority": f.priority,
            "available": bool(devices),
            "unavailable_reason": entry.unavailable_reason,
            "devices": [{"label": d.label, "kind": d.kind, "name": d.name, "memory_bytes": d.memory_bytes} for d in devices],
        })
    failed = [{"plugin": x.plugin, "stage": x.stage, "reason": x.reason, "package": x.distribution} for x in registry.failures]
    return {"providers": providers, "failed_plugins": failed}


def run(args: argparse.Namespace) -> int:
    data = collect()
    if args.json:
        print(json.dumps(data, indent=2))
        return 0
    rows = []
    for p in data["providers"]:  # type: ignore[union-attr]
        devices = ", ".join(f"{d['label']} ({d['name']})" if d["name"] else d["label"] for d in p["devices"]) or "-"
        status = "available" if p["available"] else f"unavailable: {p['unavailable_reason']}"
        rows.append([p["name"], p["package"] or "-", p["version"], p["vendor"], p["sdk_api"], p["priority"], devices, status])
    print(table(["provider", "package", "version", "vendor", "sdk", "priority", "devices", "status"], rows))
    failed = data["failed_plugins"]
    if failed:
        print("\nfailed plugins:")
        print(table(["plugin", "package", "stage", "reason"],
                    [[f["plugin"], f["package"] or "-", f["stage"], f["reason"]] for f in failed]))  # type: ignore[index]
    return 0
