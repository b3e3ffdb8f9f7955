"""``epoxy doctor``: one report to paste into a bug report: versions, CPU, BLAS, providers
and their devices, failed plugins, and the environment variables that change epoxy.

Each section is gathered on its own: a broken provider plugin or an odd platform shows up in
the report as an error line instead of ending it."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

from ..version import __version__
from ._console import Console, console_for

EXAMPLE = """example:
  epoxy doctor                # a readable report
  epoxy doctor --json > doctor.json   # attach this to a bug report
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _guarded(fn: Callable[[], Any]) -> Any:
    """A section's data, or ``{"error": ...}`` when gathering it failed."""
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 -- a doctor reports every failure, it never stops at one
        return {"error": f"{type(exc).__name__}: {exc}"}


def collect() -> dict[str, Any]:
    """The whole report as plain data (what ``--json`` prints)."""
    from .. import diagnostics
    from .providers_cmd import collect as collect_providers

    env = dict(os.environ)  # before plugins load: some set defaults of their own (NUMBA_CACHE_DIR)
    report: dict[str, Any] = {"epoxy_version": __version__}
    sections: dict[str, Callable[[], Any]] = {
        "platform": diagnostics.platform_info,
        "packages": diagnostics.package_versions,
        "cpu": diagnostics.cpu_info,
        "thread_pools": diagnostics.thread_pools,
        "environment": lambda: diagnostics.environment(env),
    }
    report.update({name: _guarded(fn) for name, fn in sections.items()})
    providers = _guarded(collect_providers)
    report["providers"] = providers.get("providers", providers) if "error" not in providers else providers
    report["failed_plugins"] = providers.get("failed_plugins", [])
    return report


def _yes(flag: bool | None) -> str:
    return "?" if flag is None else ("yes" if flag else "no")


def _section_error(out: Console, data: Any) -> bool:
    if isinstance(data, dict) and "error" in data:
        out.line(f"could not gather: {data['error']}", kind="error")
        return True
    return False


def _print_packages(out: Console, packages: Any) -> None:
    out.heading("packages")
    if _section_error(out, packages):
        return
    rows = [[name, version] for name, version in packages["epoxy"].items()]
    rows += [[name, version or "not installed"] for name, version in packages["dependencies"].items()]
    out.table(["package", "version"], rows)


def _print_cpu(out: Console, cpu: Any, pools: Any) -> None:
    out.heading("cpu")
    if not _section_error(out, cpu):
        features = cpu["features"]
        shown = ", ".join(f"{k} {_yes(v)}" for k, v in features.items()) if features else "unknown on this platform"
        out.fields([("model", cpu["model"] or "?"), ("architecture", cpu["architecture"]),
                    ("cores", f"{cpu['logical_cores']} logical, {cpu['usable_cores']} usable by this process"),
                    ("features", shown)])
    out.heading("thread pools (BLAS, OpenMP)")
    if not _section_error(out, pools):
        out.table(["api", "library", "version", "threads", "kernels", "file"],
                  [[p["user_api"], p["library"], p["version"], p["threads"], p["architecture"] or "-", p["filepath"]]
                   for p in pools] or [["-", "none loaded", "", "", "", ""]], numeric=(3,))


def _print_providers(out: Console, report: dict[str, Any]) -> None:
    from .providers_cmd import provider_rows

    out.heading("providers")
    providers = report["providers"]
    if _section_error(out, providers):
        return
    out.table(["provider", "aliases", "package", "version", "vendor", "sdk", "priority", "devices", "status"],
              provider_rows({"providers": providers}))
    failed = report["failed_plugins"]
    if failed:
        out.line()
        out.table(["plugin", "package", "stage", "reason"],
                  [[f["plugin"], f["package"] or "-", f["stage"], f["reason"]] for f in failed], title="failed plugins")
    else:
        out.line("no plugin failed to load", kind="ok")


def _print_environment(out: Console, env: Any) -> None:
    out.heading("environment variables that change epoxy")
    if _section_error(out, env):
        return
    if not env:
        out.line("none set")
        return
    out.table(["variable", "value", "effect"],
              [[e["name"], e["value"], e["effect"] or "unknown to epoxy (misspelled?)"] for e in env])


def print_report(out: Console, report: dict[str, Any]) -> None:
    """The human-readable report, section by section."""
    platform = report["platform"]
    out.heading(f"epoxy {report['epoxy_version']}")
    if not _section_error(out, platform):
        out.fields([("python", f"{platform['python']} ({platform['python_executable']})"), ("os", platform["os"])])
    _print_packages(out, report["packages"])
    _print_cpu(out, report["cpu"], report["thread_pools"])
    _print_providers(out, report)
    _print_environment(out, report["environment"])
    out.line()
    out.line("paste this report (or `epoxy doctor --json`) into bug reports", kind="info")


def run(args: argparse.Namespace) -> int:
    out = console_for(args)
    report = collect()
    if args.json:
        out.json(report)
    else:
        print_report(out, report)
    return 0
