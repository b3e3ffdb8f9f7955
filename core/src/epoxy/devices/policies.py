"""Provider selection policies: which (provider, device) pairs a session uses, by rule.

A policy has onnxruntime's selection-delegate form, ``policy(ep_devices, model_metadata,
runtime_metadata, max_selections) -> chosen``: the ep devices come in provider priority order
and it returns the chosen ones, best first. It may return ``(chosen, notes)`` to say why.
The built-in rules order by device kind, cpu last as the fallback:

- ``default``: every provider on its first device, by priority (what a session does with no
  ``providers`` and no policy).
- ``prefer_cpu`` / ``prefer_gpu`` / ``prefer_npu``: the devices of that kind first (by provider
  priority), then the cpu devices; devices of other kinds are left out. A provider that drives
  several devices is used on the best one for the policy (a session has one device per provider).
- ``max_efficiency`` / ``min_overall_power``: ordered as ``prefer_npu``, as onnxruntime does;
  epoxy measures no power.
- ``max_performance``: measured, not a rule (:mod:`epoxy.devices.tuning`).

Plugins add policies through the ``epoxy_register_policies`` hook (:class:`PolicyRegistration`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # only annotations: plugins.py imports this module, and inventory imports plugins
    from .inventory import EpDevice

#: onnxruntime's delegate form; may also return ``(chosen, notes)``
PolicyFn = Callable[[Sequence["EpDevice"], Mapping[str, str], Mapping[str, str], int], Any]
#: how many (provider, device) pairs a policy may choose (onnxruntime passes the same bound)
MAX_SELECTIONS = 8
#: the policy measured on the model, handled by the session (not a rule over devices)
MEASURED = "max_performance"
POLICY_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


@dataclass(frozen=True)
class PolicyRegistration:
    """A policy registered through ``epoxy_register_policies`` (or built in: ``plugin="epoxy"``)."""

    name: str
    policy: PolicyFn | None
    description: str
    plugin: str


class OrtExecutionProviderDevicePolicy(Enum):
    """onnxruntime's ``OrtExecutionProviderDevicePolicy``; each member names an epoxy policy."""

    DEFAULT = "default"
    PREFER_CPU = "prefer_cpu"
    PREFER_NPU = "prefer_npu"
    PREFER_GPU = "prefer_gpu"
    MAX_PERFORMANCE = "max_performance"
    MAX_EFFICIENCY = "max_efficiency"
    MIN_OVERALL_POWER = "min_overall_power"


def _one_per_provider(devices: Sequence[EpDevice]) -> list[EpDevice]:
    seen: set[str] = set()
    out = []
    for ep in devices:
        if ep.ep_name not in seen:
            seen.add(ep.ep_name)
            out.append(ep)
    return out


def default_policy(ep_devices: Sequence[EpDevice], model_metadata: Mapping[str, str],
                   runtime_metadata: Mapping[str, str], max_selections: int) -> tuple[list[EpDevice], list[str]]:
    """Every provider on its first device, by priority."""
    chosen = _one_per_provider([ep for ep in ep_devices if ep.device_index == 0])
    return chosen[:max_selections], ["every provider on its first device, by priority"]


def prefer(kind: str, why: str = "") -> PolicyFn:
    """The rule ``prefer_<kind>``: devices of ``kind`` first, then the cpu ones."""

    def policy(ep_devices: Sequence[EpDevice], model_metadata: Mapping[str, str],
               runtime_metadata: Mapping[str, str], max_selections: int) -> tuple[list[EpDevice], list[str]]:
        preferred = [ep for ep in ep_devices if ep.kind == kind]
        cpus = [ep for ep in ep_devices if ep.kind == "cpu"]
        chosen = _one_per_provider(preferred + cpus)[:max_selections]
        notes = [why] if why else []
        if kind != "cpu" and not preferred:
            found = sorted({ep.kind for ep in ep_devices}) or ["none"]
            notes.append(f"no {kind} among the installed providers' devices ({', '.join(found)}): cpu devices only")
        left = [ep.label for ep in ep_devices if ep not in chosen and ep.kind not in (kind, "cpu")]
        if left:
            notes.append(f"left out (neither {kind} nor cpu): {', '.join(left)}")
        return chosen, notes

    policy.__name__ = f"prefer_{kind}"
    return policy


#: the rules the core registers itself, name -> (policy, one line for listings)
BUILTIN_RULES: dict[str, tuple[PolicyFn | None, str]] = {
    "default": (default_policy, "every provider on its first device, by priority"),
    "prefer_cpu": (prefer("cpu"), "cpu devices only (the best cpu provider first)"),
    "prefer_gpu": (prefer("gpu"), "gpu devices first, then the cpu ones"),
    "prefer_npu": (prefer("npu"), "npu devices first, then the cpu ones"),
    "max_efficiency": (prefer("npu", "max_efficiency orders as prefer_npu, as onnxruntime does (no power figures)"),
                       "as prefer_npu (as onnxruntime does)"),
    "min_overall_power": (prefer("npu", "min_overall_power orders as prefer_npu, as onnxruntime does "
                                        "(no power figures)"), "as prefer_npu (as onnxruntime does)"),
    MEASURED: (None, "measure the candidate provider sets on the model, keep the fastest that matches cpu; "
                     "the decision is cached"),
}


def builtin_registrations() -> list[PolicyRegistration]:
    return [PolicyRegistration(name, fn, text, "epoxy") for name, (fn, text) in BUILTIN_RULES.items()]


def policy_name(spec: Any) -> str:
    """``"PREFER_GPU"``, ``"prefer_gpu"``, ``OrtExecutionProviderDevicePolicy.PREFER_GPU`` (ours
    or onnxruntime's) -> ``"prefer_gpu"``."""
    if not isinstance(spec, str) and isinstance(getattr(spec, "name", None), str):
        spec = spec.name  # an enum member, ours or onnxruntime's (pybind11 enums are not Enum)
    return str(spec).strip().lower()
