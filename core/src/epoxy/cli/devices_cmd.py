"""``epoxy devices``: the hardware the installed providers can drive, each device once with
every provider that drives it, and the selection policies a session can choose providers by."""

from __future__ import annotations

import argparse
from typing import Any

from ..devices.inventory import get_devices, unavailable_providers
from ..plugins import default_registry
from ._console import console_for

EXAMPLE = """example:
  epoxy devices          # each device: kind, vendor, name, memory, the providers driving it
  epoxy devices --json   # the same, with every provider's device properties
  epoxy run model.onnx --providers auto:prefer_gpu   # let a policy choose the providers"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def collect() -> dict[str, Any]:
    """Everything the command shows."""
    registry = default_registry()
    policies = registry.policies()
    return {"devices": [d.to_dict() for d in get_devices(registry)],
            "unavailable_providers": unavailable_providers(registry),
            "policies": {name: {"description": p.description, "plugin": p.plugin} for name, p in policies.items()}}


def _memory(size: int | None) -> str:
    return "-" if size is None else f"{size / (1 << 30):.1f} GiB"


def run(args: argparse.Namespace) -> int:
    console = console_for(args)
    data = collect()
    if args.json:
        console.json(data)
        return 0
    rows = [[d["device"], d["vendor"], d["name"], _memory(d["memory_bytes"]),
             ", ".join(f"{p['provider']} ({p['device']})" for p in d["providers"])] for d in data["devices"]]
    console.table(["device", "vendor", "name", "memory", "providers (their device)"], rows,
                  title="devices the installed providers can drive")
    for name, why in data["unavailable_providers"].items():
        console.line(f"provider {name}: no device here ({why})", "info")
    console.table(["policy", "what it does", "from"],
                  [[name, p["description"], p["plugin"]] for name, p in data["policies"].items()],
                  title="selection policies (SessionOptions.provider_selection_policy, --providers auto:POLICY)")
    return 0
