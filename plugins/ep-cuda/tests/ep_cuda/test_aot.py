"""Export/import of compiled cuda groups (SDK API 1.2) on the simulated device.

Round trips must give bit-identical outputs without lowering or generating code again;
every unusable blob is refused with :class:`ArtifactRefused` and a reason, never a crash.
The machine-code path (cubins) is exercised with a simulated backend that "builds" cubins,
so trust and source-digest rules are tested without a GPU (loading real cubins is not).
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from typing import Any

import numpy as np
import pytest
from cuda_helpers import model
from onnx import helper

import epoxy
from epoxy.contract import CompiledArtifact, Device
from epoxy.errors import ArtifactRefused
from epoxy_ep_cuda import aot, codegen
from epoxy_ep_cuda import provider as provider_module
from epoxy_ep_cuda.backend import FakeBackend
from epoxy_ep_cuda.options import TABLE
from epoxy_ep_cuda.provider import CudaProvider
from epoxy_ep_cuda.testing import FAKE_DEVICE, FakeCudaFactory, fake_registry

R = np.random.default_rng(7)
N = helper.make_node


def f32(*shape: int) -> np.ndarray:
    return R.standard_normal(shape).astype(np.float32)


def _model() -> tuple[bytes, dict[str, np.ndarray]]:
    """A Conv+BatchNorm+Relu group, then an elementwise chain (two compiled groups)."""
    feeds = {"x": f32(1, 3, 6, 6), "s": f32(1, 4, 6, 6)}
    inits = {"w": f32(4, 3, 3, 3), "b": f32(4), "g": f32(4) + 2, "bb": f32(4), "m": f32(4), "v": np.abs(f32(4)) + 1,
             "two": np.array(2.0, np.float32)}
    nodes = [N("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             N("BatchNormalization", ["c", "g", "bb", "m", "v"], ["n"]),
             N("Relu", ["n"], ["r"]),
             N("Mul", ["r", "two"], ["y0"]), N("Add", ["y0", "s"], ["y1"]), N("Sigmoid", ["y1"], ["y2"]),
             N("Sub", ["y2", "s"], ["y"])]
    return model(nodes, feeds, ["y"], inits), feeds


class _Recorder:
    """Wraps ``CudaProvider.compile`` to keep each (subgraph, kernel) a session compiles."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.pairs: list[tuple[Any, Any]] = []
        original = CudaProvider.compile

        def compile(provider: CudaProvider, subgraph: Any) -> Any:
            kernel = original(provider, subgraph)
            self.pairs.append((subgraph, kernel))
            return kernel

        monkeypatch.setattr(CudaProvider, "compile", compile)


def _session(m: bytes, options: dict[str, Any] | None = None, factory: FakeCudaFactory | None = None) -> Any:
    factory = factory or FakeCudaFactory()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = epoxy.InferenceSession(m, providers=[("cuda", options or {}), "cpu"], registry=fake_registry(factory))
    return sess, factory.created[-1]


def _args(prov: CudaProvider, sub: Any) -> list[Any]:
    graph = sub.graph
    out = []
    for name in sub.inputs:
        c = graph.constant(name)
        if c is None:
            vt = graph.value_type(name)
            c = R.standard_normal(vt.shape).astype(vt.dtype)
        out.append(prov.backend.to_device(np.asarray(c)))
    return out


def _host(values: Any) -> list[np.ndarray]:
    return [np.asarray(v).view(np.ndarray) for v in values]


def _same_bits(a: list[np.ndarray], b: list[np.ndarray]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and x.shape == y.shape
        assert x.tobytes() == y.tobytes()


class _Counter:
    """Counts calls of lowering and CUDA code generation, wherever ep-cuda calls them."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = {"lower_group": 0, "cuda_source": 0}
        for module, name in ((provider_module, "lower_group"), (aot, "lower_group"), (codegen, "cuda_source")):
            original = getattr(module, name)

            def counted(*a: Any, _original: Any = original, _name: str = name, **k: Any) -> Any:
                self.calls[_name] += 1
                return _original(*a, **k)

            monkeypatch.setattr(module, name, counted)


@pytest.mark.parametrize("options", [{}, {"cuda_graph": True}], ids=["groups", "region"])
def test_round_trip_identical_outputs_without_lowering_again(monkeypatch, options):
    rec = _Recorder(monkeypatch)
    m, _feeds = _model()
    _sess, prov = _session(m, options)
    kinds = sorted(prov.plans[k].kind for _s, k in rec.pairs)
    assert kinds == (["region"] if options else ["conv", "ew"])
    artifacts = [(sub, kernel, prov.export_compiled(kernel, sub)) for sub, kernel in rec.pairs]
    for _sub, _kernel, art in artifacts:
        assert art is not None and art.format == aot.FORMAT and art.target == "sm_90"
        header, sections = aot.FRAME.unpack(art.blob)
        assert header["options"] == {"fuse": "True", "cuda_graph": str(bool(options)), "conv_algo": "auto"}
        assert any(name.startswith("src:") for name in sections), "the blob keeps the kernels' sources"
        assert not any(name.startswith("bin:") for name in sections), "no machine code on the simulated device"
    counter = _Counter(monkeypatch)
    for sub, kernel, art in artifacts:
        imported = prov.import_compiled(sub, art)
        args = _args(prov, sub)
        _same_bits(_host(imported(*args)), _host(kernel(*args)))
    assert counter.calls == {"lower_group": 0, "cuda_source": 0}


def test_compiled_model_end_to_end(tmp_path, monkeypatch):
    m, feeds = _model()
    summary = epoxy.compile_model(m, tmp_path / "m.onnx", providers=["cuda", "cpu"], registry=fake_registry())
    assert summary is not None
    fresh, _ = _session(m)
    counter = _Counter(monkeypatch)
    loaded, prov = _session(str(tmp_path / "m.onnx"))
    assert counter.calls["lower_group"] == 0, "the ew group was lowered again instead of imported"
    status = loaded.partition_report().artifacts
    assert status and all("loaded from the compiled blob" in s for s in status.values()), status
    _same_bits(loaded.run(None, feeds), fresh.run(None, feeds))


# ---------------------------------------------------------------------------- refusals
@pytest.fixture
def exported(monkeypatch):
    rec = _Recorder(monkeypatch)
    m, _ = _model()
    sess, prov = _session(m)
    by_kind = {prov.plans[k].kind: (sub, k, prov.export_compiled(k, sub)) for sub, k in rec.pairs}
    yield prov, by_kind
    del sess  # alive through the test: its groups' specs read the session's model


def _refused(prov: CudaProvider, sub: Any, art: CompiledArtifact, match: str) -> None:
    with pytest.raises(ArtifactRefused, match=match) as info:
        prov.import_compiled(sub, art)
    assert info.value.provider == "cuda"


def _repack(art: CompiledArtifact, edit: Any) -> CompiledArtifact:
    """``art`` with its header or sections edited, in a whole, valid frame (a careful forger's)."""
    header, views = aot.FRAME.unpack(art.blob)
    sections = {name: bytes(view) for name, view in views.items()}
    edit(header, sections)
    return dataclasses.replace(art, blob=aot.FRAME.pack(header, sections))


def test_refuses_cut_or_corrupted_blobs(exported):
    prov, by_kind = exported
    sub, _k, art = by_kind["ew"]
    data = art.blob
    for cut in range(0, len(data), max(1, len(data) // 97)):
        _refused(prov, sub, dataclasses.replace(art, blob=data[:cut]), r"truncated \(cut short\)")
    flipped = bytearray(data)
    flipped[-3] ^= 0xFF
    _refused(prov, sub, dataclasses.replace(art, blob=bytes(flipped)), "corrupted")
    header_len = int.from_bytes(data[12:16], "little")
    for at in (24, 40, 56, 56 + header_len // 2, 56 + header_len - 1):  # digest, header: one digest covers all
        flipped = bytearray(data)
        flipped[at] ^= 0x01
        _refused(prov, sub, dataclasses.replace(art, blob=bytes(flipped)), "corrupted")
    _refused(prov, sub, dataclasses.replace(art, blob=b"NOTCUDA\0" + data[8:]), "not an ep-cuda blob .magic")
    _refused(prov, sub, dataclasses.replace(art, blob=data[:8] + b"\x01" + data[9:]), "layout 1.0, this ep-cuda")
    _refused(prov, sub, dataclasses.replace(art, blob=data + b"x"), "longer than its prefix says")
    trusted = dataclasses.replace(art, trusted=True)  # the core checked its bytes: no digest, still the shape
    _refused(prov, sub, dataclasses.replace(trusted, blob=data[:-1]), "truncated")
    _refused(prov, sub, dataclasses.replace(trusted, blob=data[:8] + b"\x01" + data[9:]), "layout")


def test_refuses_other_layout_version_target_options(exported, monkeypatch):
    prov, by_kind = exported
    sub, _k, art = by_kind["ew"]
    _refused(prov, sub, dataclasses.replace(art, format="cuda.plan/2"), "format")
    _refused(prov, sub, _repack(art, lambda h, s: h.update(format="cuda.plan/0")), "layout")
    _refused(prov, sub, dataclasses.replace(art, target="sm_80"), "compiled for")
    other = CudaProvider(dataclasses.replace(FAKE_DEVICE, properties={"compute_capability": "8.0"}),
                         TABLE.parse({}), FakeBackend())
    _refused(other, sub, art, "compiled for 'sm_90', this GPU is 'sm_80'")
    strict = CudaProvider(FAKE_DEVICE, TABLE.parse({"conv_algo": "im2col"}), FakeBackend())
    _refused(strict, sub, art, "options")
    monkeypatch.setattr(aot, "__version__", "0.0.0-other")
    _refused(prov, sub, art, "written by ep-cuda")


def test_refuses_another_group_and_an_altered_plan(exported):
    prov, by_kind = exported
    ew_sub, _k, ew_art = by_kind["ew"]
    conv_sub, _k2, _conv_art = by_kind["conv"]
    _refused(prov, conv_sub, ew_art, "other nodes")

    def alter(header: dict, sections: dict) -> None:
        plan = json.loads(sections["plan"])
        plan["ew"]["program"]["instrs"][0][0] = "Exp"
        sections["plan"] = json.dumps(plan).encode()

    _refused(prov, ew_sub, _repack(ew_art, alter), "altered|operands")

    def unknown_op(header: dict, sections: dict) -> None:
        plan = json.loads(sections["plan"])
        plan["ew"]["program"]["instrs"][0][0] = "system"
        sections["plan"] = json.dumps(plan).encode()

    _refused(prov, ew_sub, _repack(ew_art, unknown_op), "not an elementwise op")
    _refused(prov, ew_sub, _repack(ew_art, lambda h, s: s.update(plan=b"{")), "no readable plan")


# ---------------------------------------------------------------------------- machine code
class _CubinBackend(FakeBackend):
    """The simulated device, plus "cubins": enough to test when machine code may be used."""

    arch = "sm_90"

    def __init__(self) -> None:
        super().__init__()
        self.built: dict[str, bytes] = {}
        self.preloaded: list[str] = []

    def ensure(self, key: Any, name: str, source: str) -> None:
        self.built.setdefault(name, b"\x7fELF" + source.encode()[:32])

    def binary(self, name: str) -> bytes | None:
        return self.built.get(name)

    def preload(self, key: Any, name: str, cubin: bytes) -> None:
        assert cubin == self.built.get(name, cubin)
        self.preloaded.append(name)


class _CubinFactory(FakeCudaFactory):
    def create(self, device: Device, options: Any) -> Any:
        prov = CudaProvider(device, TABLE.parse(options), _CubinBackend())
        self.created.append(prov)
        return prov


@pytest.fixture
def with_cubins(monkeypatch):
    rec = _Recorder(monkeypatch)
    m, _ = _model()
    sess, prov = _session(m, factory=_CubinFactory())
    yield prov, {prov.plans[k].kind: (sub, k, prov.export_compiled(k, sub)) for sub, k in rec.pairs}
    del sess  # alive through the test: its groups' specs read the session's model


def test_cubins_need_a_signed_blob(with_cubins):
    prov, by_kind = with_cubins
    for sub, _k, art in by_kind.values():
        assert any(n.startswith("bin:") for n in aot.FRAME.unpack(art.blob)[1])
        _refused(prov, sub, art, "machine code .* not signed")
        assert prov.backend.preloaded == []


def test_signed_cubins_load_when_sources_regenerate_identically(with_cubins, monkeypatch):
    prov, by_kind = with_cubins
    counter = _Counter(monkeypatch)
    for sub, kernel, art in by_kind.values():
        imported = prov.import_compiled(sub, dataclasses.replace(art, trusted=True))
        args = _args(prov, sub)
        _same_bits(_host(imported(*args)), _host(kernel(*args)))
    names = {ks["name"] for _s, _k, a in by_kind.values() for ks in aot.FRAME.unpack(a.blob)[0]["kernels"]}
    assert sorted(prov.backend.preloaded) == sorted(names) and any(n.startswith("epoxy_im2col") for n in names)
    assert counter.calls["cuda_source"] >= 1, "sources are generated again from the group's nodes to check digests"


def test_signed_cubins_refused_when_the_source_differs(with_cubins, monkeypatch):
    prov, by_kind = with_cubins
    sub, _k, art = by_kind["ew"]

    def stale(header: dict, sections: dict) -> None:
        header["kernels"][0]["source_sha256"] = "0" * 64

    _refused(prov, sub, dataclasses.replace(_repack(art, stale), trusted=True), "differs from the one its cubin")
    monkeypatch.setattr(aot.nvrtc, "version", lambda: "99.0")
    _refused(prov, sub, dataclasses.replace(art, trusted=True), "NVRTC")


@pytest.mark.gpu
def test_gpu_signed_cubins_load_without_nvrtc(monkeypatch):
    """On a real GPU: the blob carries cubins; importing them compiles nothing and the
    kernels give the same bits as the freshly compiled ones."""
    rec = _Recorder(monkeypatch)
    m, _feeds = _model()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = epoxy.InferenceSession(m, providers=["cuda", "cpu"])
    prov = sess.get_provider("cuda")
    prov = getattr(prov, "wrapped", prov)
    backend = prov.backend
    assert backend.cubin_fallback is None, backend.cubin_fallback
    artifacts = [(sub, k, prov.export_compiled(k, sub)) for sub, k in rec.pairs]
    for _sub, _k, art in artifacts:
        assert any(n.startswith("bin:") for n in aot.FRAME.unpack(art.blob)[1])
    for sub, kernel, art in artifacts:
        args = _args(prov, sub)
        want = [backend.to_host(v) for v in kernel(*args)]
        backend._kernels.clear()
        compiles = backend.nvrtc_compiles
        imported = prov.import_compiled(sub, dataclasses.replace(art, trusted=True))
        got = [backend.to_host(v) for v in imported(*args)]
        assert backend.nvrtc_compiles == compiles, "an imported kernel was compiled again"
        _same_bits(got, want)
