"""``epoxy providers --check``: every provider is created on each device and probed; a broken
one is reported with its error (never crashing the command) and makes the exit code 1."""

from __future__ import annotations

import json
from typing import Any

import pytest
from fakes import Factory, mini_factory

from epoxy import plugins
from epoxy.cli.main import main
from epoxy.contract import Capability, FusedGroup, ProviderUnavailable
from epoxy.hookspecs import hookimpl
from epoxy.kit import KernelProvider
from epoxy.testing import registry_with


class _Wrapped:
    """A working provider whose capability answer is replaced by ``answer(graph)``."""

    def __init__(self, inner: KernelProvider, answer: Any) -> None:
        self.name, self.device, self.allocator = inner.name, inner.device, inner.allocator
        self.answer = answer

    def capability(self, graph: Any) -> Any:
        return self.answer(graph)

    def kernel(self, node: Any) -> Any:
        raise NotImplementedError

    def compile(self, subgraph: Any) -> Any:
        raise NotImplementedError


def answering(name: str, answer: Any) -> Factory:
    good = mini_factory(name)
    return Factory(name, lambda d, o: _Wrapped(good.make(d, o), answer))


class Devices(Factory):
    """Devices from ``found`` (a callable: may raise)."""

    def __init__(self, name: str, found: Any) -> None:
        super().__init__(name, mini_factory(name).make)
        self.found = found

    def devices(self) -> Any:
        return self.found()


def _raise(exc: BaseException) -> Any:
    def fail(*_args: Any) -> Any:
        raise exc

    return fail


class BrokenHook:
    @hookimpl
    def epoxy_register_providers(self, register: Any) -> None:
        raise RuntimeError("plugin cannot register")


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["providers", "--check", *args])
    out, err = capsys.readouterr()
    return code, out, err


def _by_provider(out: str) -> dict[str, dict[str, Any]]:
    data = json.loads(out)
    return {c["provider"]: c for c in data["checks"]}


@pytest.fixture
def use(monkeypatch: pytest.MonkeyPatch) -> Any:
    def install(*factories: Any) -> Any:
        registry = registry_with(*factories)
        monkeypatch.setattr(plugins, "_default_registry", registry)
        return registry

    return install


def test_working_providers_pass(use, capsys):
    use(mini_factory("cpu"), answering("grouper", lambda g: Capability(groups=(FusedGroup((0,), "g"),))),
        answering("shy", lambda g: Capability(declined={0: "float64 only"})))
    code, out, _ = _run(capsys)
    assert code == 0, out
    assert "all providers passed the check" in out
    code, out, _ = _run(capsys, "--json")
    rows = _by_provider(out)
    assert json.loads(out)["ok"] is True
    assert rows["cpu"] == {"provider": "cpu", "device": "cpu:cpu:0", "status": "ok", "stage": "capability",
                           "detail": "claims the Relu probe"}
    assert rows["grouper"]["detail"] == "claims the Relu probe in a fused group"
    assert rows["shy"]["detail"] == "declines the Relu probe: float64 only"


@pytest.mark.parametrize(("factory", "stage", "detail"), [
    (Devices("devs", _raise(RuntimeError("driver crashed"))), "devices", "RuntimeError: driver crashed"),
    (Devices("devs", lambda: ["not a device"]), "devices", "devices() must return epoxy.contract.Device"),
    (Factory("creates", _raise(ValueError("no context"))), "create", "ValueError: no context"),
    (Factory("creates", _raise(SystemExit(3))), "create", "SystemExit: 3"),
    (answering("asks", _raise(KeyError("op table"))), "capability", "KeyError: 'op table'"),
    (answering("asks", lambda g: None), "capability", "returned NoneType, expected Capability"),
    (answering("asks", lambda g: Capability(nodes=(5,))), "capability", "invalid nodes (5,)"),
    (answering("asks", lambda g: Capability(nodes=(0,), groups=(FusedGroup((0,)),))), "capability",
     "claims a node twice"),
    (answering("asks", lambda g: Capability(declined={0: ""})), "capability", "non-empty reason"),
])
def test_a_broken_provider_fails_the_check(use, capsys, factory, stage, detail):
    use(mini_factory("cpu"), factory)
    code, out, err = _run(capsys, "--json")
    assert code == 1, out + err
    rows = _by_provider(out)
    assert rows["cpu"]["status"] == "ok"  # the others are still checked
    broken = rows[factory.name]
    assert (broken["status"], broken["stage"]) == ("failed", stage), broken
    assert detail in broken["detail"], broken
    code, out, _ = _run(capsys)  # the table says the same
    assert code == 1 and "1 failed" in out and detail in out


def test_unavailable_is_not_a_failure(use, capsys):
    use(mini_factory("cpu"), Devices("npu", _raise(ProviderUnavailable("no NPU here; pip install npu-driver"))))
    code, out, _ = _run(capsys, "--json")
    assert code == 0
    npu = _by_provider(out)["npu"]
    assert (npu["status"], npu["device"], npu["detail"]) == ("unavailable", None, "no NPU here; pip install npu-driver")


def test_each_device_is_checked(use, capsys):
    from epoxy.contract import Device

    def create(device: Any, options: Any) -> Any:
        if device.index == 1:
            raise RuntimeError("device 1 is busy")
        return mini_factory("two").make(device, options)

    two = Devices("two", lambda: [Device("two", "npu", 0), Device("two", "npu", 1)])
    two.make = create
    use(two)
    code, out, _ = _run(capsys, "--json")
    data = json.loads(out)["checks"]
    assert code == 1
    assert [(c["device"], c["status"]) for c in data] == [("two:npu:0", "ok"), ("two:npu:1", "failed")]


def test_load_failures_are_failures(monkeypatch, capsys):
    registry = registry_with(mini_factory("cpu"))
    registry.add_plugin(BrokenHook(), name="broken")
    monkeypatch.setattr(plugins, "_default_registry", registry)
    code, out, _ = _run(capsys, "--json")
    assert code == 1
    broken = _by_provider(out)["broken"]
    assert (broken["status"], broken["stage"]) == ("failed", "epoxy_register_providers")
    assert "plugin cannot register" in broken["detail"]
    # one provider by name: only its rows; a plugin that failed to load can be named too
    code, out, _ = _run(capsys, "cpu", "--json")
    assert code == 0 and list(_by_provider(out)) == ["cpu"]
    code, out, _ = _run(capsys, "broken", "--json")
    assert code == 1 and list(_by_provider(out)) == ["broken"]


def test_strict_mode_errors_are_reported_not_raised(use, capsys, monkeypatch):
    use(Devices("devs", _raise(RuntimeError("driver crashed"))))
    monkeypatch.setenv("EPOXY_STRICT_PLUGINS", "1")
    code, out, _ = _run(capsys, "--json")
    devs = _by_provider(out)["devs"]
    assert code == 1 and devs["status"] == "failed" and "driver crashed" in devs["detail"]


def test_unknown_provider_and_bad_combination(use, capsys):
    use(mini_factory("cpu"))
    code, _, err = _run(capsys, "nope")
    assert code == 1 and "unknown provider 'nope'" in err
    code = main(["providers", "--check", "--options"])
    assert code == 1 and "do not combine" in capsys.readouterr().err
