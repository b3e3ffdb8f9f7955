"""``epoxy-conformance --no-fallback``: cases using ops the provider does not claim are
counted apart ("not claimed"), as the pytest op scope skips them, not as its failures."""

from __future__ import annotations

import numpy as np

from epoxy.contract import Device
from epoxy.kit import KernelProvider, KernelRegistry
from epoxy.plugins import reset_default_registry
from epoxy.testing import registry_with
from epoxy_sdk.conformance.cli import main

KERNELS = KernelRegistry()
KERNELS.register("Relu", (6, 13, 14))(lambda node: lambda x: np.maximum(x, x.dtype.type(0)))


class Factory:
    name, vendor, version, sdk_api, priority = "relu_only", "tests", "1.0", "1.0", 5

    def devices(self):
        return [Device(self.name, "cpu")]

    def create(self, device, options):
        return KernelProvider(self.name, device, KERNELS, options)


def test_no_fallback_counts_unclaimed_cases_apart(capsys):
    reset_default_registry(registry_with(Factory(), plugin_name="relu_only"))
    assert main(["--providers", "relu_only", "--no-fallback", "--by-op", "--kind", "node", "--op", "Relu"]) == 0
    out = capsys.readouterr().out
    assert "FAIL" not in out, out
    assert "0 failed, " in out and "not claimed (skipped)" in out, out
    relu = [line.split() for line in out.splitlines() if line.startswith("Relu ")]
    assert relu and int(relu[0][1]) >= 1 and relu[0][2] == "0", out


def test_json_report_follows_its_schema(tmp_path, capsys):
    import json

    from epoxy_sdk.conformance.report import SCHEMA, validate

    reset_default_registry(registry_with(Factory(), plugin_name="relu_only"))
    path = tmp_path / "report.json"
    assert main(["--providers", "relu_only", "--no-fallback", "--kind", "node", "--op", "Relu", "--op", "Neg",
                 "--provider-option", "speed=fast", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    report = json.loads(path.read_text())
    assert validate(report) == [] and report["schema"] == SCHEMA
    outcomes = {c["name"]: c["outcome"] for c in report["cases"]}
    assert outcomes["test_relu"] == "pass" and outcomes["test_neg"] == "not-claimed"
    relu = next(c for c in report["cases"] if c["name"] == "test_relu")
    assert relu["ops"] == ["Relu-14"] and relu["ran_on"] == {"relu_only": 1} and relu["seconds"] >= 0
    assert report["by_op"]["Relu-14"]["pass"] >= 1 and report["by_provider"]["relu_only"] >= 1
    assert report["options"] == {"relu_only": {"speed": "fast"}} and report["fallback"] is False
    assert report["versions"]["providers"]["relu_only"]["sdk_api"] == str(Factory.sdk_api)
    assert report["versions"]["sdk_api"] and report["machine"]["python"]
    assert "not-claimed" in out.splitlines()[0]  # the terminal table's header


def test_a_wrong_dtype_is_a_fail_and_a_crash_an_error_in_the_report(tmp_path):
    import json

    kernels = KernelRegistry()
    kernels.register("Relu", (6, 13, 14))(lambda node: lambda x: np.maximum(x, 0).astype(np.float64))
    kernels.register("Neg", (6, 13))(lambda node: lambda x: 1 / 0)

    class Bad(Factory):
        name = "bad"

        def create(self, device, options):
            return KernelProvider(self.name, device, kernels, options)

    reset_default_registry(registry_with(Bad(), plugin_name="bad"))
    path = tmp_path / "r.json"
    main(["--providers", "bad", "--no-fallback", "--kind", "node", "--match", "test_relu", "--match", "test_neg",
          "--json", str(path)])
    cases = {c["name"]: c for c in json.loads(path.read_text())["cases"]}
    assert cases["test_relu"]["outcome"] == "fail" and "OutputTypeError" in cases["test_relu"]["message"]
    assert cases["test_neg"]["outcome"] == "error" and "ZeroDivisionError" in cases["test_neg"]["message"]
