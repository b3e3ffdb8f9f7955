"""A session's providers chosen by a policy: which policy, what it chose, and why.

The session asks :func:`select_providers` when it has a policy and no provider list
(``SessionOptions.provider_selection_policy``, a selection delegate, or ``providers=
"auto:<policy>"``). The answer, a :class:`ProviderSelection`, becomes the provider list (each
provider on the device chosen for it, through ``device_index``) and is kept for
``session.get_providers().selection`` and ``partition_report().selection``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidArgumentError
from ..plugins import ProviderRegistry
from .inventory import EpDevice, get_ep_devices
from .policies import MAX_SELECTIONS, MEASURED, policy_name

#: the prefix that makes a provider list a policy: ``providers="auto:prefer_gpu"``
AUTO_PREFIX = "auto:"


@dataclass
class ProviderSelection:
    """What a policy chose: ``chosen`` (best first), ``notes`` (why), and for the measured
    policy its ``table`` of candidates and the cache file it read or wrote."""

    policy: str
    chosen: list[EpDevice]
    notes: list[str] = field(default_factory=list)
    #: ``rule`` (built in), ``plugin <name>``, ``delegate``, ``measured``, ``cache``
    source: str = "rule"
    table: list[dict[str, Any]] = field(default_factory=list)
    cache_path: str | None = None
    #: the winning candidate's session, just measured: a session being created takes it over
    #: instead of creating the same providers again (OpenVINO compiling vgg19 twice: +30 s)
    session: Any = field(default=None, repr=False, compare=False)

    def providers(self) -> list[tuple[str, dict[str, Any]]]:
        """The session's provider list: each chosen provider on its chosen device."""
        return [(ep.ep_name, {"device_index": ep.device_index}) for ep in self.chosen]

    def summary(self) -> str:
        chosen = ", ".join(ep.label for ep in self.chosen) or "nothing"
        return f"policy {self.policy} ({self.source}) chose {chosen}"

    def lines(self) -> list[str]:
        """The summary, then the notes: what the partition report prints."""
        return [self.summary(), *self.notes]

    def to_dict(self) -> dict[str, Any]:
        return {"policy": self.policy, "source": self.source,
                "chosen": [{"provider": ep.ep_name, "device": ep.device.label, "device_index": ep.device_index,
                            "name": ep.device.name} for ep in self.chosen],
                "notes": list(self.notes), "table": list(self.table), "cache": self.cache_path}


#: the measured policy's entry point, given by the session: ep devices -> a selection
Measure = Callable[[list[EpDevice]], ProviderSelection]


def auto_policy(providers: Any) -> str | None:
    """The policy in ``"auto:<policy>"`` or ``["auto:<policy>"]``, else ``None``. ``auto:``
    mixed with provider names is an error (a policy chooses the whole list)."""
    items = [providers] if isinstance(providers, str) else list(providers or [])
    autos = [p for p in items if isinstance(p, str) and p.strip().lower().startswith(AUTO_PREFIX)]
    if not autos:
        return None
    if len(items) != 1:
        raise InvalidArgumentError(f"{autos[0]!r} chooses every provider: give it alone, not with {items}")
    name = autos[0].strip()[len(AUTO_PREFIX):].strip()
    if not name:
        raise InvalidArgumentError("'auto:' needs a policy name, e.g. 'auto:prefer_gpu'")
    return name


def select_providers(spec: Any, registry: ProviderRegistry, model_metadata: Mapping[str, str],
                     measure: Measure | None = None) -> ProviderSelection:
    """Run the policy ``spec`` (a name, an ``OrtExecutionProviderDevicePolicy``, or a delegate
    callable) over the installed providers' devices.

    A user's delegate that fails is an :class:`InvalidArgumentError` naming it; a plugin's
    policy that fails is reported (a RuntimeWarning and a note) and ``default`` used instead.
    """
    ep_devices = get_ep_devices(registry)
    if callable(spec) and not isinstance(spec, str):
        who = f"delegate {getattr(spec, '__name__', type(spec).__name__)}"
        chosen, notes = _run_policy(spec, ep_devices, model_metadata, who)
        return ProviderSelection(who, chosen, notes, source="delegate")
    name = policy_name(spec)
    policies = registry.policies()
    registration = policies.get(name)
    if registration is None:
        raise InvalidArgumentError(f"unknown provider selection policy {spec!r}; known: {sorted(policies)}")
    if name == MEASURED:
        if measure is None:
            raise InvalidArgumentError("max_performance measures the model: it is for sessions and `epoxy tune`")
        return measure(ep_devices)
    assert registration.policy is not None
    source = "rule" if registration.plugin == "epoxy" else f"plugin {registration.plugin}"
    try:
        chosen, notes = _run_policy(registration.policy, ep_devices, model_metadata, f"policy {name!r}")
    except InvalidArgumentError as exc:
        if registration.plugin == "epoxy":
            raise
        note = f"{exc}; the default policy is used instead"
        warnings.warn(note, RuntimeWarning, stacklevel=4)
        fallback = select_providers("default", registry, model_metadata)
        fallback.notes.insert(0, note)
        return fallback
    return ProviderSelection(name, chosen, notes, source=source)


def _run_policy(policy: Callable[..., Any], ep_devices: list[EpDevice], model_metadata: Mapping[str, str],
                who: str) -> tuple[list[EpDevice], list[str]]:
    try:
        answer = policy(list(ep_devices), dict(model_metadata), {}, MAX_SELECTIONS)
    except Exception as exc:  # a policy's own bug: named, never a crash deep in the session
        raise InvalidArgumentError(f"{who} failed: {type(exc).__name__}: {exc}") from exc
    notes: list[str] = []
    if isinstance(answer, tuple) and len(answer) == 2 and isinstance(answer[1], list):
        answer, notes = answer
    return _checked(answer, ep_devices, who), [str(n) for n in notes]


def _checked(answer: Any, ep_devices: Sequence[EpDevice], who: str) -> list[EpDevice]:
    """The policy's answer as a list of the offered ep devices, or an error saying what is wrong."""
    if not isinstance(answer, (list, tuple)):
        raise InvalidArgumentError(f"{who} returned {type(answer).__name__}, not a list of the EpDevice objects "
                                   "it was given")
    offered = {id(ep) for ep in ep_devices}
    chosen: list[EpDevice] = []
    for item in answer:
        if not isinstance(item, EpDevice) or id(item) not in offered:
            raise InvalidArgumentError(f"{who} returned {item!r}, which is not one of the EpDevice objects it was "
                                       "given")
        if any(ep.ep_name == item.ep_name for ep in chosen):
            raise InvalidArgumentError(f"{who} chose provider {item.ep_name!r} twice: a session drives one device "
                                       "per provider")
        chosen.append(item)
    if len(chosen) > MAX_SELECTIONS:
        raise InvalidArgumentError(f"{who} chose {len(chosen)} devices; at most {MAX_SELECTIONS}")
    if not chosen:
        raise InvalidArgumentError(f"{who} chose no device (offered: {[ep.label for ep in ep_devices]})")
    return chosen
