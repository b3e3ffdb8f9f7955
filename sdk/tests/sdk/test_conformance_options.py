"""The kit's option checks: a factory's optional ``options()`` is str -> str, and ``create``
refuses an unknown option with an ``InvalidArgumentError`` naming it and the known ones."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

TEMPLATE_SRC = Path(__file__).resolve().parents[2] / "template" / "src"

CONFTEST = '''
import numpy as np
from epoxy.contract import SDK_API_VERSION, Device
from epoxy.errors import InvalidArgumentError
from epoxy.kit import KernelProvider, KernelRegistry
from epoxy.plugins import reset_default_registry
from epoxy.testing import registry_with

KERNELS = KernelRegistry()
for op, fn in {"Add": np.add, "Mul": np.multiply, "MatMul": np.matmul}.items():
    KERNELS.register(op, (7, 13, 14))(lambda node, fn=fn: fn)
KERNELS.register("Relu", (6, 13, 14))(lambda node: lambda x: np.maximum(x, 0).astype(x.dtype))

class Described:
    """Right: options() from the table create() checks against."""
    vendor, version, sdk_api, priority = "tests", "1.0", SDK_API_VERSION, 5
    table = {"speed": "fast | slow (default fast)", "tile": "int > 0 (default 32)"}
    def __init__(self, name):
        self.name = name
    def devices(self):
        return [Device(self.name, "cpu")]
    def options(self):
        return self.table
    def check(self, options):
        unknown = sorted(set(options) - set(self.table))
        if unknown:
            raise InvalidArgumentError(f"unknown options {unknown}; known options: {sorted(self.table)}")
    def create(self, device, options):
        self.check(options)
        return KernelProvider(self.name, device, KERNELS, options)

class Lax(Described):
    def check(self, options):
        pass

class Vague(Described):
    def check(self, options):
        if options:
            raise InvalidArgumentError("bad options")

class WrongError(Described):
    def check(self, options):
        if options:
            raise KeyError(sorted(options))

class NotStr(Described):
    table = {"speed": 3}

class CoreNamed(Described):
    table = {"device_index": "which device"}

KINDS = [("described", Described), ("lax", Lax), ("vague", Vague), ("wrong_error", WrongError),
         ("not_str", NotStr), ("core_named", CoreNamed)]
reset_default_registry(registry_with(*(cls(name) for name, cls in KINDS), plugin_name="kit-test"))
'''


def run_option_checks(pytester: pytest.Pytester, provider: str) -> pytest.RunResult:
    return pytester.runpytest_inprocess(
        "--pyargs", "epoxy_sdk.conformance.test_api_scope", "--epoxy-provider", provider, "-k", "option",
        "-p", "no:cacheprovider",
    )


@pytest.mark.parametrize(("provider", "failing"), [
    ("described", None),
    ("lax", "test_unknown_option_is_a_clear_error"),
    ("vague", "test_unknown_option_is_a_clear_error"),
    ("wrong_error", "test_unknown_option_is_a_clear_error"),
    ("not_str", "test_options_are_described_as_str_to_str"),
    ("core_named", "test_options_are_described_as_str_to_str"),
])
def test_option_checks(pytester, provider, failing):
    pytester.makeconftest(CONFTEST)
    result = run_option_checks(pytester, provider)
    outcomes = result.parseoutcomes()
    out = result.stdout.str()
    assert outcomes.get("failed", 0) == (failing is not None), out[-2000:]
    assert outcomes.get("passed", 0) == 2 - (failing is not None), out[-2000:]
    if failing:
        assert failing in out.split("short test summary")[-1], out[-2000:]


def test_option_checks_skip_without_options(pytester):
    """options() is optional: a factory without it is not failed for that."""
    pytester.makeconftest(CONFTEST.replace("    def options(self):\n        return self.table\n", ""))
    outcomes = run_option_checks(pytester, "described").parseoutcomes()
    assert outcomes.get("skipped", 0) == 2 and not outcomes.get("failed", 0)


def test_template_passes_the_api_scope(pytester):
    """The provider template (with its options()) is a provider the kit passes whole."""
    pytester.makeconftest(f'''
import sys
sys.path.insert(0, {str(TEMPLATE_SRC)!r})
from epoxy_ep_example import plugin
from epoxy.plugins import reset_default_registry
from epoxy.testing import registry_with

reset_default_registry(registry_with(plugin))
''')
    result = pytester.runpytest_inprocess(
        "--pyargs", "epoxy_sdk.conformance.test_api_scope", "--epoxy-provider", "example", "-p", "no:cacheprovider",
        "-rs",
    )
    outcomes = result.parseoutcomes()
    out = result.stdout.str()
    # skipped: the end-to-end run (the template has no Mul/MatMul and no cpu fallback here) and
    # the group compile check (a kernel provider proposes no groups); its chains do run
    skipped = [line for line in out.splitlines() if line.startswith("SKIPPED")]
    assert not outcomes.get("failed", 0) and len(skipped) <= 2, out[-2000:]
    assert all("no cpu fallback" in line or "proposes no fused groups" in line for line in skipped), skipped
    assert outcomes.get("passed", 0) >= 12, result.stdout.str()[-2000:]


def test_template_options_restrict_what_it_claims():
    import sys

    sys.path.insert(0, str(TEMPLATE_SRC))
    try:
        from epoxy_ep_example.plugin import ExampleFactory
    finally:
        sys.path.remove(str(TEMPLATE_SRC))
    from epoxy.contract import ProviderFactoryWithOptions
    from epoxy.errors import InvalidArgumentError

    factory = ExampleFactory()
    assert isinstance(factory, ProviderFactoryWithOptions)
    device = factory.devices()[0]
    assert factory.create(device, {"ops": "Relu"}).allowed_ops == {"Relu"}
    with pytest.raises(InvalidArgumentError, match=r"unknown options \['op'\]; known options: \['ops'\]"):
        factory.create(device, {"op": "Relu"})
