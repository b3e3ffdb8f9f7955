"""Plugin loading: entry points one at a time, failures recorded, never a crash.

Environment variables:

- ``EPOXY_DISABLE_PLUGIN_AUTOLOAD=1``: do not load ``epoxy.providers`` entry points
  (plugins can still be added explicitly with :meth:`ProviderRegistry.add_plugin`).
- ``EPOXY_PROVIDERS=a,b``: allowlist; other providers' entry points are not loaded.
- ``EPOXY_STRICT_PLUGINS=1``: re-raise plugin failures as :class:`PluginLoadError`.
- ``EPOXY_DEVICE_TIMEOUT=seconds``: how long a factory's ``devices()`` may take (default 10);
  one that hangs makes the provider unavailable ("timed out") instead of hanging the host.
"""

from __future__ import annotations

import os
import threading
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from typing import TYPE_CHECKING, Any

import pluggy

from .contract import Device, ProviderFactory, ProviderUnavailable
from .errors import PluginLoadError
from .hookspecs import PROJECT_NAME, EpoxySpecs
from .sdk_api import incompatibility

if TYPE_CHECKING:
    from .devices.policies import PolicyRegistration
    from .optimize.pipeline import PassRegistration

ENTRY_POINT_GROUP = "epoxy.providers"
ENV_DISABLE_AUTOLOAD = "EPOXY_DISABLE_PLUGIN_AUTOLOAD"
ENV_ALLOWLIST = "EPOXY_PROVIDERS"
ENV_STRICT = "EPOXY_STRICT_PLUGINS"
ENV_DEVICE_TIMEOUT = "EPOXY_DEVICE_TIMEOUT"
DEFAULT_DEVICE_TIMEOUT = 10.0
#: Names the core uses for its own units (control flow runs on "core"; copies on "copy").
RESERVED_NAMES = frozenset({"core", "copy"})
_REQUIRED_FACTORY_ATTRS = ("name", "vendor", "version", "sdk_api", "priority", "devices", "create")


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


def strict_mode() -> bool:
    """``EPOXY_STRICT_PLUGINS=1``: plugin and provider failures are errors, not skips."""
    return _env_flag(ENV_STRICT)


def device_timeout() -> float:
    """Seconds ``devices()`` may take (``EPOXY_DEVICE_TIMEOUT``, default 10)."""
    try:
        return max(0.001, float(os.environ.get(ENV_DEVICE_TIMEOUT, "") or DEFAULT_DEVICE_TIMEOUT))
    except ValueError:
        return DEFAULT_DEVICE_TIMEOUT


def _call_with_timeout(fn: Callable[[], Any], timeout: float, what: str) -> Any:
    """Run ``fn`` in a daemon thread; a call still running after ``timeout`` s is abandoned
    (Python cannot kill it) and reported as a ``TimeoutError``."""
    outcome: list[Any] = []

    def target() -> None:
        try:
            outcome.append((True, fn()))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            outcome.append((False, exc))

    thread = threading.Thread(target=target, name=f"epoxy-{what}", daemon=True)
    thread.start()
    thread.join(timeout)
    if not outcome:
        raise TimeoutError(f"{what} did not return within {timeout:g} s (set {ENV_DEVICE_TIMEOUT} to wait longer)")
    ok, value = outcome[0]
    if not ok:
        raise value
    return value


def _checked_options(described: Any) -> dict[str, str]:
    """``options()``'s answer as a plain dict, or ``TypeError`` saying what is wrong with it."""
    if not isinstance(described, Mapping):
        raise TypeError(f"must return a mapping of option name to help, got {type(described).__name__}")
    bad = [k for k, v in described.items() if not isinstance(k, str) or not isinstance(v, str)]
    if bad:
        raise TypeError(f"names and help must be str; not for {bad!r}")
    return dict(described)


def _checked_aliases(declared: Any) -> tuple[str, ...]:
    """A factory's ``aliases`` as a tuple without repeats, or ``TypeError`` saying what is wrong."""
    if not isinstance(declared, (tuple, list)):
        raise TypeError(f"must be a tuple of names, got {type(declared).__name__}")
    bad = [a for a in declared if not isinstance(a, str) or not a or a != a.strip()]
    if bad:
        raise TypeError(f"aliases must be non-empty str without surrounding spaces; not {bad!r}")
    return tuple(dict.fromkeys(declared))


def _env_allowlist() -> frozenset[str] | None:
    raw = os.environ.get(ENV_ALLOWLIST, "").strip()
    return frozenset(p.strip() for p in raw.split(",") if p.strip()) or None


@dataclass(frozen=True)
class PluginFailure:
    """A plugin or factory that could not be used, and why (shown by ``epoxy providers``)."""

    plugin: str
    stage: str
    reason: str
    distribution: str | None = None


@dataclass
class ProviderEntry:
    """A registered factory with its discovered devices (or why it has none)."""

    factory: ProviderFactory
    plugin: str
    distribution: str | None
    distribution_version: str | None
    _devices: tuple[Device, ...] | None = field(default=None, repr=False)
    _unavailable: str | None = field(default=None, repr=False)
    _options: dict[str, str] | None = field(default=None, repr=False)
    _options_error: str | None = field(default=None, repr=False)
    _aliases: tuple[str, ...] = field(default=(), init=False, repr=False)
    _aliases_error: str | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        # read now, not lazily: the registry indexes aliases when the factory registers
        try:
            declared = getattr(self.factory, "aliases", ())
            self._aliases = tuple(a for a in _checked_aliases(declared) if a != self.name)
        except Exception as exc:  # a broken plugin must not take the host down
            self._aliases_error = f"aliases: {type(exc).__name__}: {exc}"
            self._raise_if_strict(self._aliases_error, exc)

    @property
    def name(self) -> str:
        return self.factory.name

    @property
    def aliases(self) -> tuple[str, ...]:
        """Other names sessions accept for this provider (onnxruntime's, e.g.
        ``"CPUExecutionProvider"``): the factory's optional ``aliases`` attribute, less those
        the registry refused (see :meth:`ProviderRegistry.resolve`)."""
        return self._aliases

    @property
    def aliases_error(self) -> str | None:
        """Why the factory's ``aliases`` attribute could not be used (then ignored), or ``None``."""
        return self._aliases_error

    def _refuse_alias(self, alias: str) -> None:
        self._aliases = tuple(a for a in self._aliases if a != alias)

    def devices(self) -> tuple[Device, ...]:
        """Devices found (enumerated once, lazily; a failure becomes the unavailable reason)."""
        if self._devices is None:
            try:
                found = _call_with_timeout(lambda: tuple(self.factory.devices()), device_timeout(),
                                           f"provider {self.name!r} devices()")
                if not all(isinstance(d, Device) for d in found):
                    raise TypeError("devices() must return epoxy.contract.Device objects")
                self._devices = found
                if not found:
                    self._unavailable = "no devices found"
            except ProviderUnavailable as exc:
                self._devices, self._unavailable = (), str(exc) or "unavailable"
            except Exception as exc:  # a broken factory must not take the host down
                self._devices = ()
                self._unavailable = f"device enumeration failed: {type(exc).__name__}: {exc}"
                self._raise_if_strict(self._unavailable, exc)
        return self._devices

    def _raise_if_strict(self, reason: str, exc: BaseException) -> None:
        """Under ``EPOXY_STRICT_PLUGINS`` a recorded factory failure is an error instead."""
        if strict_mode():
            raise PluginLoadError(f"provider {self.name!r}: {reason}", provider=self.name) from exc

    def options(self) -> dict[str, str]:
        """The options the factory describes (its optional ``options()``), asked once.

        ``{}`` when it has no such method, or when the call raises, hangs or returns anything
        but a str -> str mapping: that is kept in :attr:`options_error` (shown by
        ``epoxy providers``) so a broken description never breaks the provider itself.
        """
        if self._options is None:
            self._options = {}
            describe = getattr(self.factory, "options", None)
            if describe is not None:
                try:
                    self._options = _checked_options(_call_with_timeout(
                        describe, device_timeout(), f"provider {self.name!r} options()"))
                except Exception as exc:  # a broken plugin must not take the host down
                    self._options_error = f"options() failed: {type(exc).__name__}: {exc}"
                    self._raise_if_strict(self._options_error, exc)
        return self._options

    @property
    def options_error(self) -> str | None:
        """Why the factory's ``options()`` could not be used, or ``None``."""
        self.options()
        return self._options_error

    @property
    def available(self) -> bool:
        return bool(self.devices())

    @property
    def unavailable_reason(self) -> str | None:
        self.devices()
        return self._unavailable


class ProviderRegistry:
    """The plugin manager plus the factories and failures it collected.

    The core calls hooks only through the typed methods here, never ``pm.hook`` directly.
    """

    def __init__(self, *, autoload: bool | None = None) -> None:
        self.pm = pluggy.PluginManager(PROJECT_NAME)
        self.pm.add_hookspecs(EpoxySpecs)
        self.failures: list[PluginFailure] = []
        self._entries: dict[str, ProviderEntry] = {}
        self._alias_owner: dict[str, str] = {}  # alias -> the name of the provider it stands for
        self._passes: list[PassRegistration] | None = None
        self._policies: dict[str, PolicyRegistration] | None = None
        from .optimize.builtin import BuiltinPasses

        self.add_plugin(BuiltinPasses(), name="epoxy.builtin")
        if autoload is None:
            autoload = not _env_flag(ENV_DISABLE_AUTOLOAD)
        if autoload:
            self.load_entry_points(metadata.entry_points(group=ENTRY_POINT_GROUP))

    # -- loading -------------------------------------------------------------------------
    def load_entry_points(self, entry_points: Iterable[metadata.EntryPoint]) -> None:
        """Load each entry point on its own; a failure is recorded and the rest still load."""
        allow = _env_allowlist()
        for ep in sorted(entry_points, key=lambda e: e.name):
            if allow is not None and ep.name not in allow:
                continue
            dist = getattr(ep, "dist", None)
            dist_name = dist.metadata["Name"] if dist is not None else None
            dist_version = dist.version if dist is not None else None
            try:
                plugin = ep.load()
            except BaseException as exc:  # noqa: BLE001 - SystemExit from a plugin too
                if isinstance(exc, KeyboardInterrupt):
                    raise
                self._fail(ep.name, "import", exc, dist_name)
                continue
            self.add_plugin(plugin, name=ep.name, distribution=dist_name, distribution_version=dist_version)

    def add_plugin(
        self,
        plugin: Any,
        *,
        name: str,
        distribution: str | None = None,
        distribution_version: str | None = None,
    ) -> None:
        """Register a plugin object/module and collect the factories it registers."""
        try:
            self.pm.register(plugin, name=name)
            self.pm.check_pending()
        except Exception as exc:
            self._fail(name, "register", exc, distribution)
            return
        collected: list[ProviderFactory] = []

        def register(factory: ProviderFactory, **_future: Any) -> None:
            collected.append(factory)

        caller = self.pm.subset_hook_caller("epoxy_register_providers", remove_plugins=[
            p for p in self.pm.get_plugins() if p is not plugin
        ])
        try:
            caller(register=register)
        except Exception as exc:
            self._fail(name, "epoxy_register_providers", exc, distribution)
            self.pm.unregister(plugin)
            return
        for factory in collected:
            self._add_factory(factory, name, distribution, distribution_version)

    def _add_factory(
        self, factory: Any, plugin: str, distribution: str | None, dist_version: str | None
    ) -> None:
        missing = [a for a in _REQUIRED_FACTORY_ATTRS if not hasattr(factory, a)]
        if missing:
            self._fail(plugin, "factory", TypeError(f"factory lacks {', '.join(missing)}"), distribution)
            return
        refused = incompatibility(factory.sdk_api)
        if refused is not None:
            self._fail(plugin, "sdk-version", RuntimeError(f"provider {factory.name!r} {refused}"), distribution)
            return
        if factory.name in RESERVED_NAMES:
            self._fail(
                plugin, "factory", RuntimeError(f"provider name {factory.name!r} is reserved by the core"), distribution
            )
            return
        if factory.name in self._entries:
            self._fail(
                plugin, "factory", RuntimeError(f"provider name {factory.name!r} already registered"), distribution
            )
            return
        entry = ProviderEntry(factory, plugin, distribution, dist_version)
        self._entries[factory.name] = entry
        owner = self._alias_owner.pop(factory.name, None)
        if owner is not None:  # a provider's own name wins over an alias, whichever loaded first
            self._refuse_alias(self._entries[owner], factory.name, f"it is the name of provider {factory.name!r}")
        for alias in entry.aliases:
            if alias in RESERVED_NAMES:
                self._refuse_alias(entry, alias, "the name is reserved by the core")
            elif alias in self._entries:
                self._refuse_alias(entry, alias, f"it is the name of provider {alias!r}")
            elif alias in self._alias_owner:
                self._refuse_alias(entry, alias, f"it is already an alias of provider {self._alias_owner[alias]!r}")
            else:
                self._alias_owner[alias] = factory.name

    def _refuse_alias(self, entry: ProviderEntry, alias: str, why: str) -> None:
        """Drop one alias of ``entry`` and record why; the provider keeps its name and other aliases."""
        entry._refuse_alias(alias)
        self._fail(entry.plugin, "alias",
                   RuntimeError(f"alias {alias!r} of provider {entry.name!r} refused: {why}"), entry.distribution)

    def _fail(self, plugin: str, stage: str, exc: BaseException, distribution: str | None) -> None:
        reason = f"{type(exc).__name__}: {exc}"
        self.failures.append(PluginFailure(plugin, stage, reason, distribution))
        if strict_mode():
            trace = "".join(traceback.format_exception(exc))  # not format_exc(): no handler may be active
            raise PluginLoadError(f"plugin {plugin!r} failed at {stage}: {reason}\n{trace}", provider=plugin) from exc

    # -- queries -------------------------------------------------------------------------
    def entries(self) -> list[ProviderEntry]:
        """All registered factories, highest priority first."""
        return sorted(self._entries.values(), key=lambda e: (-e.factory.priority, e.name))

    def get(self, name: str) -> ProviderEntry | None:
        """The provider registered under this name (its canonical name, never an alias)."""
        return self._entries.get(name)

    def resolve(self, name: str) -> ProviderEntry | None:
        """The provider called ``name``: its own name or one of its aliases
        (``"CPUExecutionProvider"`` -> the cpu entry); ``None`` when no provider answers to it."""
        entry = self._entries.get(name)
        if entry is None and name in self._alias_owner:
            entry = self._entries.get(self._alias_owner[name])
        return entry

    def canonical_name(self, name: str) -> str:
        """The provider's own name for ``name`` when it is an alias, else ``name`` unchanged."""
        entry = self.resolve(name)
        return entry.name if entry is not None else name

    def aliases(self) -> dict[str, str]:
        """Every accepted alias -> the name of the provider it stands for."""
        return dict(self._alias_owner)

    def describe_names(self) -> list[str]:
        """Provider names by priority, each followed by its aliases: ``"cpu (CPUExecutionProvider)"``;
        what errors about unknown providers list."""
        return [f"{e.name} ({', '.join(e.aliases)})" if e.aliases else e.name for e in self.entries()]

    def _collect(self, hook: str, make_register: Callable[[str], Callable[..., None]]) -> None:
        """Call ``hook`` on each plugin in registration order (the core's own first, never set
        order), one plugin at a time, with ``make_register(plugin_name)`` as its callback: a
        plugin whose hook raises is a failure naming it, and the others still register."""
        for name, plugin in self.pm.list_name_plugin():
            if plugin is None:  # blocked plugin
                continue
            caller = self.pm.subset_hook_caller(
                hook, remove_plugins=[p for p in self.pm.get_plugins() if p is not plugin])
            try:
                caller(register=make_register(name))
            except Exception as exc:
                self._fail(name, hook, exc, None)

    def passes(self) -> list[PassRegistration]:
        """Passes registered through ``epoxy_register_passes`` (collected once). A pass
        registered wrongly (unknown level, not callable) is a plugin failure naming it."""
        from .optimize.pipeline import PassRegistration

        if self._passes is None:
            found: list[PassRegistration] = []

            def registrar(plugin: str) -> Callable[..., None]:
                def register(pass_: Callable[..., Any], *, level: str = "basic",
                             providers: Sequence[str] | None = None, gradient_safe: bool = False,
                             **_future: Any) -> None:
                    found.append(PassRegistration(pass_, level, tuple(providers) if providers is not None else None,
                                                  bool(gradient_safe), plugin))
                return register

            self._collect("epoxy_register_passes", registrar)
            self._passes = found
        return self._passes

    def policies(self) -> dict[str, PolicyRegistration]:
        """Selection policies by name: the built-in rules, then those registered through
        ``epoxy_register_policies`` (collected once). A bad registration (a name that is not
        lowercase ``a-z0-9_``, taken, or a policy that is not callable) is a plugin failure
        naming it; the plugin's other policies still register."""
        from .devices.policies import POLICY_NAME, PolicyRegistration, builtin_registrations

        if self._policies is None:
            found = {p.name: p for p in builtin_registrations()}

            def registrar(plugin: str) -> Callable[..., None]:
                def register(policy_name: str, policy: Callable[..., Any], *, description: str = "",
                             **_future: Any) -> None:
                    if not isinstance(policy_name, str) or not POLICY_NAME.match(policy_name):
                        why: str | None = f"policy name {policy_name!r} must be lowercase letters, digits and _"
                    elif policy_name in found:
                        why = f"policy {policy_name!r} is already registered by {found[policy_name].plugin}"
                    elif not callable(policy):
                        why = f"policy {policy_name!r} is not callable"
                    else:
                        why = None
                        found[policy_name] = PolicyRegistration(policy_name, policy, str(description), plugin)
                    if why is not None:
                        self._fail(plugin, "policy", ValueError(why), None)
                return register

            self._collect("epoxy_register_policies", registrar)
            self._policies = found
        return self._policies


_default_registry: ProviderRegistry | None = None
_default_lock = threading.Lock()


def default_registry() -> ProviderRegistry:
    """The process-wide registry, built on first use from installed entry points."""
    global _default_registry
    with _default_lock:
        if _default_registry is None:
            _default_registry = ProviderRegistry()
        return _default_registry


def reset_default_registry(registry: ProviderRegistry | None = None) -> None:
    """Replace (or drop, to reload lazily) the process-wide registry; for tests and tools."""
    global _default_registry
    with _default_lock:
        _default_registry = registry
