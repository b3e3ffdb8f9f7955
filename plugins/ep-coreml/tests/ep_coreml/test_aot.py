"""Export/import of converted Core ML groups (SDK API 1.2) on any OS.

Predictions go through the test MIL interpreter (as in test_runtime_simulated), so a round
trip is checked for identical outputs on Linux; imports must never convert again (the
conversion entry point is patched to raise) and every unusable blob is refused with
:class:`ArtifactRefused` and a reason.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import stat
import time
import warnings
import zipfile
from typing import Any

import numpy as np
import pytest
from coreml_harness import model, rand
from mil_interpreter import load_program, run_program
from onnx import helper

import epoxy
from epoxy.contract import Device
from epoxy.errors import ArtifactRefused
from epoxy.testing import registry_with
from epoxy_ep_coreml import aot, program
from epoxy_ep_coreml import provider as provider_module
from epoxy_ep_coreml.factory import CONVERTER, CoreMLProviderFactory
from epoxy_ep_coreml.provider import CoreMLProvider

N = helper.make_node


class _MLModel:
    """coremltools.models.MLModel stand-in: the saved package run by the MIL interpreter."""

    def __init__(self, path: Any, compute_units: str) -> None:
        self.program = load_program(path)

    def predict(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return run_program(self.program, feeds)


class _Apple(CoreMLProviderFactory):
    def devices(self) -> list[Device]:
        return [Device("coreml", "apple", 0, "simulated")]


class _Converter(CoreMLProviderFactory):
    def devices(self) -> list[Device]:
        return [CONVERTER]


def _cnn() -> tuple[Any, dict[str, np.ndarray]]:
    feeds = {"x": rand(1, 3, 16, 16)}
    m = model([N("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]), N("Relu", ["c"], ["r"]),
               N("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
               N("Conv", ["p", "w2"], ["c2"]), N("Sigmoid", ["c2"], ["y"])], feeds,
              consts={"w": rand(8, 3, 3, 3), "b": rand(8), "w2": rand(4, 8, 1, 1)})
    return m, feeds


def _session(m: Any, factory: Any, cache: Any, **options: Any) -> Any:
    from epoxy_ep_cpu.factory import CpuProviderFactory

    registry = registry_with(factory, CpuProviderFactory(), plugin_name="coreml-test")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return epoxy.InferenceSession(m, providers=[("coreml", {"cache_dir": str(cache), **options}), "cpu"],
                                      registry=registry)


@pytest.fixture
def simulated(monkeypatch):
    from epoxy_ep_coreml import runner

    monkeypatch.setattr(provider_module, "can_predict", lambda: True)  # fresh conversions (provider)
    monkeypatch.setattr(runner, "can_predict", lambda: True)  # imported packages (aot)
    monkeypatch.setattr(runner, "_loader", _MLModel)


def _no_conversion(monkeypatch) -> None:
    def refuse(*_a: Any, **_k: Any) -> None:
        raise AssertionError("Core ML conversion ran during an import")

    monkeypatch.setattr(program, "convert", refuse)
    monkeypatch.setattr(program, "build_program", refuse)


def _pairs(monkeypatch) -> list[tuple[Any, Any]]:
    pairs: list[tuple[Any, Any]] = []
    original = CoreMLProvider.compile

    def compile(self: CoreMLProvider, subgraph: Any) -> Any:
        kernel = original(self, subgraph)
        pairs.append((subgraph, kernel))
        return kernel

    monkeypatch.setattr(CoreMLProvider, "compile", compile)
    return pairs


def _provider(sess: Any) -> CoreMLProvider:
    prov = sess.get_provider("coreml")
    return getattr(prov, "wrapped", prov)


def test_round_trip_identical_outputs_without_converting(simulated, monkeypatch, tmp_path):
    pairs = _pairs(monkeypatch)
    m, feeds = _cnn()
    sess = _session(m, _Apple(), tmp_path / "a")
    (sub, kernel), = pairs
    prov = _provider(sess)
    art = prov.export_compiled(kernel, sub)
    assert art is not None and art.format == aot.FORMAT and art.target == "iOS15"
    assert art.blob == prov.export_compiled(kernel, sub).blob, "export is deterministic"
    other = _provider(_session(m, _Apple(), tmp_path / "b"))  # its own, empty-of-this-group cache
    _no_conversion(monkeypatch)
    imported = other.import_compiled(sub, art)
    args = [feeds["x"] if n == "x" else sub.graph.constant(n) for n in sub.inputs]
    for got, want in zip(imported(*args), kernel(*args)):
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes()
    extracted = list((tmp_path / "b" / "imported").iterdir())
    assert [p.name for p in extracted] == [hashlib.sha256(aot.FRAME.unpack_payload(art.blob)[1]).hexdigest()]


def test_compiled_model_end_to_end_on_linux(simulated, monkeypatch, tmp_path):
    """``epoxy.compile_model`` through ``compile_devices`` (the real factory: unavailable
    here), then a session that imports the package instead of converting."""
    monkeypatch.setenv("EPOXY_COREML_CACHE_DIR", str(tmp_path / "compile-cache"))
    m, feeds = _cnn()
    started = time.perf_counter()
    epoxy.compile_model(m, tmp_path / "m.onnx", providers=["coreml", "cpu"])
    convert_s = time.perf_counter() - started
    fresh = _session(m, _Apple(), tmp_path / "fresh")
    _no_conversion(monkeypatch)
    started = time.perf_counter()
    loaded = _session(str(tmp_path / "m.onnx"), _Apple(), tmp_path / "load")
    import_s = time.perf_counter() - started
    status = loaded.partition_report().artifacts
    assert status and all("loaded from the compiled blob" in s for s in status.values()), status
    for got, want in zip(loaded.run(None, feeds), fresh.run(None, feeds)):
        assert got.tobytes() == want.tobytes()
    print(f"\ncoreml small CNN: convert+compile {convert_s:.2f} s, session from compiled model {import_s:.2f} s")


def test_converter_session_imports_without_conversion(monkeypatch, tmp_path):
    """On Linux (convert-only): the compiled model's groups are checked and extracted, never
    converted; the kernel refuses to run, as a converted one does."""
    monkeypatch.setenv("EPOXY_COREML_CACHE_DIR", str(tmp_path / "compile-cache"))
    m, _feeds = _cnn()
    epoxy.compile_model(m, tmp_path / "m.onnx", providers=["coreml", "cpu"])
    _no_conversion(monkeypatch)
    sess = _session(str(tmp_path / "m.onnx"), _Converter(), tmp_path / "load")
    assert all("loaded" in s for s in sess.partition_report().artifacts.values())
    assert list((tmp_path / "load" / "imported").glob("*/model.mlpackage"))


# ---------------------------------------------------------------------------- refusals
@pytest.fixture
def exported(monkeypatch, tmp_path):
    pairs = _pairs(monkeypatch)
    m, _ = _cnn()
    sess = _session(m, _Converter(), tmp_path / "a")
    (sub, kernel), = pairs
    prov = _provider(sess)
    yield prov, sub, prov.export_compiled(kernel, sub), m
    del sess  # alive through the test: its group's spec reads the session's model


def _refused(prov: Any, sub: Any, art: Any, match: str) -> None:
    with pytest.raises(ArtifactRefused, match=match) as info:
        prov.import_compiled(sub, art)
    assert info.value.provider == "coreml"


def _with_payload(art: Any, payload: bytes) -> Any:
    """``art`` with another payload in a whole, valid frame (as a careful forger would)."""
    header, _ = aot.FRAME.unpack_payload(art.blob)
    return dataclasses.replace(art, blob=aot.FRAME.pack(header, payload))


def test_refuses_cut_corrupted_and_foreign_blobs(exported):
    prov, sub, art, _m = exported
    data = art.blob
    for cut in range(0, len(data), max(1, len(data) // 61)):
        _refused(prov, sub, dataclasses.replace(art, blob=data[:cut]), "truncated \\(cut short\\)")
    flipped = bytearray(data)
    flipped[-100] ^= 0x55
    _refused(prov, sub, dataclasses.replace(art, blob=bytes(flipped)), "corrupted")
    header_len = int.from_bytes(data[12:16], "little")
    flipped = bytearray(data)
    flipped[56 + header_len // 2] ^= 0x01  # a header byte: the frame's digest covers the header too
    _refused(prov, sub, dataclasses.replace(art, blob=bytes(flipped)), "corrupted")
    _refused(prov, sub, dataclasses.replace(art, blob=data + b"x"), "longer than its prefix says")
    _refused(prov, sub, dataclasses.replace(art, blob=b"NOTCOREM" + data[8:]), "not an ep-coreml blob .magic")
    _refused(prov, sub, dataclasses.replace(art, blob=data[:8] + b"\x01" + data[9:]), "layout 1.0, this ep-coreml")
    _refused(prov, sub, dataclasses.replace(art, format="coreml.mlpackage/9"), "format")
    trusted = dataclasses.replace(art, trusted=True)  # the core checked its bytes: no digest, still the shape
    _refused(prov, sub, dataclasses.replace(trusted, blob=data[:-1]), "truncated")
    _refused(prov, sub, dataclasses.replace(trusted, blob=b"NOTCOREM" + data[8:]), "magic")


def test_refuses_other_options_versions_and_groups(exported, monkeypatch, tmp_path):
    prov, sub, art, m = exported
    fp16 = _provider(_session(m, _Converter(), tmp_path / "c", compute_precision="fp16"))
    _refused(fp16, sub, art, "compute_precision")
    _refused(prov, sub, dataclasses.replace(art, target="iOS17"), "targets")
    monkeypatch.setattr(aot, "_coremltools_version", lambda: "8.0")
    _refused(prov, sub, art, "coremltools 9")
    monkeypatch.undo()
    other_m = model(N("Relu", ["x"], ["y"]), {"x": rand(2, 3)})
    pairs = _pairs(monkeypatch)
    other = _provider(_session(other_m, _Converter(), tmp_path / "d"))
    (other_sub, _k), = pairs
    _refused(other, other_sub, art, "other nodes")


def _zip(entries: list[tuple[str, int, bytes]]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as zf:
        for name, mode, data in entries:
            info = zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0))
            info.external_attr = mode << 16
            info.create_system = 3
            zf.writestr(info, data)
    return buffer.getvalue()


@pytest.mark.parametrize("name,mode,match", [
    ("model.mlpackage/../../escaped.txt", stat.S_IFREG | 0o644, "plain relative path"),
    ("/tmp/absolute.txt", stat.S_IFREG | 0o644, "plain relative path"),
    ("model.mlpackage\\..\\x", stat.S_IFREG | 0o644, "plain relative path"),
    ("model.mlpackage/link", stat.S_IFLNK | 0o777, "link or special"),
    ("elsewhere/file", stat.S_IFREG | 0o644, "outside"),
])
def test_refuses_archive_entries_that_escape(exported, tmp_path, name, mode, match):
    prov, sub, art, _m = exported
    payload = _zip([("model.mlpackage/Manifest.json", stat.S_IFREG | 0o644, b"{}"), (name, mode, b"/etc/passwd")])
    _refused(prov, sub, _with_payload(art, payload), match)
    imported = tmp_path / "a" / "imported"
    assert not imported.exists() or not any(imported.rglob("*")), "nothing is extracted from a refused archive"
    assert not (tmp_path / "escaped.txt").exists()


def test_refuses_a_package_that_is_not_a_zip(exported):
    prov, sub, art, _m = exported
    _refused(prov, sub, _with_payload(art, b"PK\x03\x04 not really"), "not a readable zip")


def test_factory_offers_the_converter_for_compiling(tmp_path):
    factory = CoreMLProviderFactory()
    assert factory.sdk_api == "1.2"
    (device,) = factory.compile_devices()
    assert device.kind == "converter"
    assert factory.create(device, {"cache_dir": str(tmp_path)}).convert_only
    assert not factory.create(Device("coreml", "apple", 0, "a Mac"), {"cache_dir": str(tmp_path)}).convert_only


def test_console_script_with_an_onnx_output_is_epoxy_compile(monkeypatch, tmp_path, capsys):
    import onnx

    from epoxy_ep_coreml.compile_tool import main

    monkeypatch.setenv("EPOXY_COREML_CACHE_DIR", str(tmp_path / "cache"))
    m, _feeds = _cnn()
    onnx.save(m, tmp_path / "m.onnx")
    assert main([str(tmp_path / "m.onnx"), "-o", str(tmp_path / "out.onnx"), "--compute-precision", "fp16",
                 "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert [g["provider"] for g in summary["groups"]] == ["coreml"]
    compiled = onnx.load(tmp_path / "out.onnx")
    context = [n for n in compiled.graph.node if n.domain == "ai.epoxy.compiled"]
    assert len(context) == 1
    options = json.loads(next(a.s for a in context[0].attribute if a.name == "options"))
    assert options["compute_precision"] == "fp16"
    assert not list(tmp_path.glob("*.mlpackage")), "no folder output for a .onnx destination"
