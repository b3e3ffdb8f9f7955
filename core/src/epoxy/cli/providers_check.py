"""``epoxy providers --check``: start every installed provider on every device it reports and
ask it about a one-node Relu model, so a broken plugin shows up here, with its error, instead
of as a provider silently skipped by sessions.

Each step a session relies on is tried in turn and stops at the first failure: ``devices()``
(through the registry, so its timeout applies), ``create(device, {})``, then ``capability``
on the probe graph, whose answer must be well formed (the conformance kit's rules). A
provider that raises ``ProviderUnavailable`` (no hardware here) is *unavailable*, not
failed; a refused alias is a *warning* (the provider still loads under its name). Nothing a
plugin raises escapes: every error becomes a row.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from numbers import Integral
from typing import Any, cast

from ..plugins import ProviderEntry, ProviderRegistry

OK, FAILED, UNAVAILABLE, WARNING = "ok", "failed", "unavailable", "warning"
#: the registry's unavailable reasons that mean a broken ``devices()``, not missing hardware
_BROKEN_DEVICES = "device enumeration failed"
PROBE_OP = "Relu"


@dataclass(frozen=True)
class CheckResult:
    """One row of the check: a provider (on one device, when it got that far)."""

    provider: str
    device: str | None
    status: str  # OK, FAILED, UNAVAILABLE or WARNING
    stage: str  # the step the row is about: load, alias, devices, create, capability
    detail: str

    @property
    def failed(self) -> bool:
        return self.status == FAILED


def _error(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def probe_graph() -> Any:
    """x (float32 [2, 3]) -> Relu -> y, as the ``GraphSpec`` sessions hand providers."""
    import onnx
    from onnx import TensorProto, helper

    from ..graph.graph_spec import CoreGraph
    from ..load.loader import load_model

    graph = helper.make_graph(
        [helper.make_node(PROBE_OP, ["x"], ["y"], name="probe")], "epoxy_providers_check",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    model: onnx.ModelProto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    loaded = load_model(model)
    return CoreGraph(loaded.model.graph, loaded.model.opset_imports)


def capability_problem(cap: Any, n_nodes: int) -> str | None:
    """Why ``cap`` is not a well-formed answer for a graph of ``n_nodes`` nodes, or ``None``."""
    from ..contract import Capability, FusedGroup

    if not isinstance(cap, Capability):
        return f"capability() returned {type(cap).__name__}, expected Capability"

    def bad_indices(indices: Any) -> bool:
        try:
            return not all(isinstance(i, Integral) and not isinstance(i, bool) and 0 <= cast(int, i) < n_nodes
                           for i in indices)
        except TypeError:
            return True

    if bad_indices(cap.nodes):
        return f"capability() returned invalid nodes {cap.nodes!r} (the graph has {n_nodes})"
    if not all(isinstance(g, FusedGroup) and not bad_indices(g.nodes) and g.nodes for g in cap.groups):
        return f"capability() returned invalid groups {cap.groups!r}"[:300]
    claimed = [*cap.nodes, *(i for g in cap.groups for i in g.nodes)]
    if len(claimed) != len(set(claimed)):
        return f"capability() claims a node twice: {claimed}"
    if not isinstance(cap.declined, Mapping):
        return f"capability() returned declined={cap.declined!r}, expected a mapping"
    for i, reason in cap.declined.items():
        if bad_indices([i]) or not isinstance(reason, str) or not reason.strip():
            return f"capability() declined node {i!r} with {reason!r}: needs a valid index and a non-empty reason"
    return None


def _answer(cap: Any) -> str:
    if cap.nodes:
        return f"claims the {PROBE_OP} probe"
    if cap.groups:
        return f"claims the {PROBE_OP} probe in a fused group"
    reason = cap.declined.get(0)
    return f"declines the {PROBE_OP} probe: {reason}" if reason else f"leaves the {PROBE_OP} probe to others"


def check_device(entry: ProviderEntry, device: Any, graph: Callable[[], Any]) -> CheckResult:
    """create + capability on one device."""
    name, label = entry.name, getattr(device, "label", str(device))
    try:
        provider = entry.factory.create(device, {})
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - a broken plugin must not take the command down
        return CheckResult(name, label, FAILED, "create", _error(exc))
    try:
        probe = graph()
    except Exception as exc:  # noqa: BLE001 - the core's own probe failing: still a row, not a crash
        return CheckResult(name, label, FAILED, "capability", f"could not build the probe graph: {_error(exc)}")
    try:
        cap = provider.capability(probe)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - reported as the provider's failure
        return CheckResult(name, label, FAILED, "capability", _error(exc))
    problem = capability_problem(cap, len(probe.nodes))
    if problem:
        return CheckResult(name, label, FAILED, "capability", problem)
    return CheckResult(name, label, OK, "capability", _answer(cap))


def check_entry(entry: ProviderEntry, graph: Callable[[], Any]) -> list[CheckResult]:
    """Rows for one provider: one per device, or one saying why there is none."""
    name = entry.name
    rows = []
    if entry.aliases_error:
        rows.append(CheckResult(name, None, WARNING, "alias", entry.aliases_error))
    try:
        devices = entry.devices()
        reason = entry.unavailable_reason
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - EPOXY_STRICT_PLUGINS re-raises the factory's error
        return [*rows, CheckResult(name, None, FAILED, "devices", _error(exc))]
    if not devices:
        broken = bool(reason) and reason.startswith(_BROKEN_DEVICES)  # type: ignore[union-attr]
        return [*rows, CheckResult(name, None, FAILED if broken else UNAVAILABLE, "devices", reason or "no devices")]
    return [*rows, *(check_device(entry, d, graph) for d in devices)]


def _once(build: Callable[[], Any]) -> Callable[[], Any]:
    """``build()`` on first call, the same value (or the same error) after."""
    memo: list[tuple[bool, Any]] = []

    def get() -> Any:
        if not memo:
            try:
                memo.append((True, build()))
            except Exception as exc:  # noqa: BLE001 - kept and raised again on every call
                memo.append((False, exc))
        ok, value = memo[0]
        if not ok:
            raise value
        return value

    return get


def load_failures(registry: ProviderRegistry, only: Iterable[str] | None = None) -> list[CheckResult]:
    """Plugins that failed to load (failed), and aliases the registry refused (warnings)."""
    wanted = None if only is None else set(only)
    rows = []
    for f in registry.failures:
        if wanted is not None and f.plugin not in wanted:
            continue
        status = WARNING if f.stage == "alias" else FAILED
        rows.append(CheckResult(f.plugin, None, status, f.stage, f.reason))
    return rows


def check(registry: ProviderRegistry, entries: list[ProviderEntry], *, with_failures: bool = True) -> list[CheckResult]:
    """Every row of ``epoxy providers --check`` for ``entries`` (plus the load failures)."""
    graph = _once(probe_graph)
    rows = [row for entry in entries for row in check_entry(entry, graph)]
    if with_failures:
        rows += load_failures(registry)
    return rows


def as_json(rows: list[CheckResult]) -> dict[str, Any]:
    return {"ok": not any(r.failed for r in rows), "checks": [asdict(r) for r in rows]}


def as_rows(rows: list[CheckResult]) -> list[list[str]]:
    return [[r.provider, r.device or "-", r.status, r.stage, r.detail] for r in rows]
