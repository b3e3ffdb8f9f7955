"""``epoxy partition`` and ``epoxy ops`` after the kit review (issue #15): warnings go into
the report's notes, not raw into the table; ops run only inside fused groups are listed."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest

from epoxy.cli import ops_cmd
from epoxy.contract import SDK_API_VERSION, Device
from epoxy.demo import MODEL_PATH
from epoxy.kit import OpSupport
from epoxy.plugins import reset_default_registry
from epoxy.testing import registry_with


def epoxy(*args: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([sys.executable, "-m", "epoxy.cli.main", *args], capture_output=True, text=True,
                            check=False)
    assert result.returncode == 0, result.stderr + result.stdout
    return result


# -- 4. warnings while the session is built become notes -----------------------------------------
@pytest.mark.parametrize("json_output", [False, True])
def test_partition_routes_warnings_into_notes(json_output: bool) -> None:
    # onnxruntime's name for a provider no epoxy package declares: the session warns and skips it
    args = ["partition", str(MODEL_PATH), "--providers", "TensorrtExecutionProvider,cpu"]
    result = epoxy(*args, *(["--json"] if json_output else []))
    assert "Warning" not in result.stderr and "Warning" not in result.stdout, result.stderr
    if json_output:
        notes = json.loads(result.stdout)["notes"]
        assert any("TensorrtExecutionProvider" in n and "not installed" in n for n in notes), notes
    else:
        assert "note: provider 'TensorrtExecutionProvider' is not installed" in result.stdout


def test_warnings_not_already_notes_are_added_once() -> None:
    from epoxy.cli.partition_cmd import add_warnings_to_notes

    notes = ["provider 'x' skipped: no device"]
    add_warnings_to_notes(notes, ["provider 'x' skipped: no device", "something else", "something else"])
    assert notes == ["provider 'x' skipped: no device", "warning: something else"]


# -- 5. epoxy ops lists ops a provider runs only inside fused groups ------------------------------
class _CompilerFactory:
    """A compiling provider's factory: it lists its ops with group_ops() and/or names only."""

    vendor, version, sdk_api, priority = "tests", "0.0.1", SDK_API_VERSION, 5

    def __init__(self, name: str, *, supported: Sequence[Any] | None = None, grouped: Sequence[Any] | None = None):
        self.name = name
        if supported is not None:
            self.supported_ops = lambda: list(supported)
        if grouped is not None:
            self.group_ops = lambda: list(grouped)

    def devices(self) -> Sequence[Device]:
        return [Device(self.name, "cpu", 0, "test compiler")]

    def create(self, device: Device, options: Mapping[str, Any]) -> Any:
        raise NotImplementedError


@pytest.fixture
def installed() -> Iterator[Any]:
    """Install factories as the process-wide registry `epoxy ops` reads, for one test."""

    def install(*factories: Any) -> None:
        reset_default_registry(registry_with(*factories))

    yield install
    reset_default_registry(None)


def _ops(name: str, capsys: pytest.CaptureFixture[str], *, as_json: bool = False) -> str:
    assert ops_cmd.run(argparse.Namespace(provider=name, json=as_json)) == 0
    return capsys.readouterr().out


def test_ops_lists_group_only_ops_of_a_factory_without_supported_ops(installed, capsys) -> None:
    installed(_CompilerFactory("fuseonly", grouped=[OpSupport("", "Gelu", (20,)), "com.microsoft::FusedMatMul"]))
    out = _ops("fuseonly", capsys)
    assert "does not list its ops" not in out
    assert "Gelu" in out and "FusedMatMul" in out and "com.microsoft" in out
    rows = [line for line in out.splitlines() if "Gelu" in line or "FusedMatMul" in line]
    assert all(line.rstrip().endswith("in groups only") for line in rows), out
    data = json.loads(_ops("fuseonly", capsys, as_json=True))
    assert {(o["domain"], o["op"], o["runs"]) for o in data} == {
        ("ai.onnx", "Gelu", "in groups only"), ("com.microsoft", "FusedMatMul", "in groups only")}
    assert next(o for o in data if o["op"] == "Gelu")["opsets"] == ["20+"]


def test_ops_marks_group_only_ops_next_to_single_node_ops(installed, capsys) -> None:
    installed(_CompilerFactory("mixed", supported=[OpSupport("", "Relu", (6, 13, 14))],
                               grouped=[OpSupport("", "Erf", (13,)), OpSupport("", "Relu", (14,))]))
    data = {o["op"]: o for o in json.loads(_ops("mixed", capsys, as_json=True))}
    assert data["Relu"]["runs"] == "nodes" and data["Relu"]["opsets"] == ["6-12", "13", "14+"]
    assert data["Erf"]["runs"] == "in groups only"
    assert "(1 run only inside fused groups)" in _ops("mixed", capsys)


def test_ops_accepts_op_names_without_versions(installed, capsys) -> None:
    # a compiling provider's supported_ops may name ops without opset tracking (ep-coreml's does)
    installed(_CompilerFactory("names", supported=["Conv", "Relu"]))
    data = json.loads(_ops("names", capsys, as_json=True))
    assert [(o["domain"], o["op"], o["opsets"]) for o in data] == [
        ("ai.onnx", "Conv", ["any"]),
        ("ai.onnx", "Relu", ["any"]),
    ]


def test_ops_of_a_kernel_provider_unchanged(capsys) -> None:
    out = _ops("cpu", capsys)
    assert "runs" not in out.splitlines()[0] and "Conv" in out
