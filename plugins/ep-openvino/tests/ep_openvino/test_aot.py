"""Ahead-of-time compiled groups (issue #18): ``export_compiled`` / ``import_compiled`` round
trips give bit-identical outputs, and every blob that does not fit is refused with the reason
(never a crash, never handed to OpenVINO when our own checks can tell)."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from ov_test_models import conv_net, make_model

import epoxy
import epoxy_ep_openvino
from epoxy.contract import CompiledArtifact
from epoxy.errors import ArtifactRefused
from epoxy.kit.blob_frame import PREFIX_SIZE
from epoxy_ep_openvino import aot, artifacts
from epoxy_ep_openvino.factory import OpenVINOProviderFactory
from epoxy_ep_openvino.provider import OpenVINOProvider
from epoxy_ep_openvino.specialize import SPECIALIZE_AFTER

OPTIONS = {"min_group_cost": 0}


# -- models ------------------------------------------------------------------------------------
def _static_cnn(rng):
    """conv_net with its batch dim fixed to 2 (a fully static group)."""
    model = conv_net(rng)
    for value in (model.graph.input[0], model.graph.output[0]):
        dim = value.type.tensor_type.shape.dim[0]
        dim.Clear()
        dim.dim_value = 2
    onnx.checker.check_model(model)
    return model


def _dynamic_mlp(rng):
    """x[N, 16] -> MatMul -> Add -> Relu -> MatMul: a dynamic batch dim."""
    w1 = (rng.standard_normal((16, 32)) * 0.3).astype(np.float32)
    b1 = (rng.standard_normal(32) * 0.1).astype(np.float32)
    w2 = (rng.standard_normal((32, 8)) * 0.3).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["hb"]),
             helper.make_node("Relu", ["hb"], ["r"]), helper.make_node("MatMul", ["r", "w2"], ["y"])]
    f = TensorProto.FLOAT
    return make_model(nodes, [("x", f, ["N", 16])], [("y", f, ["N", 8])], {"w1": w1, "b1": b1, "w2": w2})


def _two_outputs(rng):
    """One group with two graph outputs (and one value used both inside and outside)."""
    w = (rng.standard_normal((12, 12)) * 0.3).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["relu"]),
             helper.make_node("Sigmoid", ["m"], ["sig"]), helper.make_node("Add", ["relu", "sig"], ["both"])]
    f = TensorProto.FLOAT
    return make_model(nodes, [("x", f, [3, 12])], [("both", f, [3, 12]), ("sig", f, [3, 12])], {"w": w})


_MODELS = {"cnn": (_static_cnn, [(2, 3, 16, 16)]), "dynamic_mlp": (_dynamic_mlp, [(1, 16), (5, 16)]),
           "two_outputs": (_two_outputs, [(3, 12)])}


# -- helpers -----------------------------------------------------------------------------------
def _recording(monkeypatch, seen):
    """Patches ``OpenVINOProvider.compile`` to append (provider, subgraph, kernel) to ``seen``."""
    original = OpenVINOProvider.compile

    def compile(self, subgraph):
        kernel = original(self, subgraph)
        seen.append((self, subgraph, kernel))
        return kernel

    monkeypatch.setattr(OpenVINOProvider, "compile", compile)
    return seen


@pytest.fixture
def recorded(monkeypatch):
    """Every (provider, subgraph, kernel) ``OpenVINOProvider.compile`` returns in the test."""
    return _recording(monkeypatch, [])


def _session(model, **options):
    return epoxy.InferenceSession(model, providers=[("openvino", {**OPTIONS, **options}), "cpu"])


def _exported(model, recorded, **options):
    """A fresh session of ``model`` and {group label: (subgraph, artifact)} of its groups."""
    sess = _session(model, **options)
    provider = epoxy_ep_openvino.openvino_provider(sess)
    out = {}
    for owner, subgraph, kernel in recorded:
        if owner is provider:  # the last kernel per label is the one the session runs
            artifact = provider.export_compiled(kernel, subgraph)
            assert artifact is not None and artifact.format == artifacts.FORMAT
            out[subgraph.group.label] = (subgraph, artifact)
    recorded.clear()
    assert out, "the openvino provider compiled no group"
    return sess, out


def _imported_session(model, exported, monkeypatch, **options):
    """A session whose provider imports each group's blob instead of compiling it."""
    def compile(self, subgraph):
        found = exported.get(subgraph.group.label)
        return self.import_compiled(subgraph, found[1]) if found else OpenVINOProvider._kernel(self, subgraph, None)

    monkeypatch.setattr(OpenVINOProvider, "compile", compile)
    try:
        sess = _session(model, **options)
    finally:
        monkeypatch.undo()
    return sess


def _provider(**options) -> OpenVINOProvider:
    factory = OpenVINOProviderFactory()
    return factory.create(factory.devices()[0], {**OPTIONS, **options})


@pytest.fixture(scope="module")
def cnn_artifact():
    """(subgraph, artifact) of the static CNN's one group."""
    with pytest.MonkeyPatch.context() as mp:
        sess, exported = _exported(_static_cnn(np.random.default_rng(0)), _recording(mp, []))
    del sess
    (subgraph, artifact), = exported.values()
    return subgraph, artifact


def _refused(provider, subgraph, artifact, *words):
    with pytest.raises(ArtifactRefused) as info:
        provider.import_compiled(subgraph, artifact)
    text = str(info.value)
    assert info.value.provider == "openvino"
    for word in words:
        assert word in text, text
    return text


def _header_len(blob: bytes) -> int:
    """The header length field of the frame's prefix (bytes 12-15, epoxy.kit.blob_frame)."""
    return int.from_bytes(blob[12:16], "little")


def _repacked(artifact, **header_changes):
    """``artifact`` with header fields changed and a valid digest (as a careful forger would)."""
    header, payload = artifacts.unpack(artifact.blob)
    header.update(header_changes)
    ident = artifacts.Identity(header.pop("openvino"), header.pop("device"), header.pop("device_name"),
                               header.pop("options"))
    return dataclasses.replace(artifact, blob=artifacts.pack(ident, header, bytes(payload)))


# -- round trips -------------------------------------------------------------------------------
def test_factory_declares_sdk_api_1_2():
    assert OpenVINOProviderFactory.sdk_api == "1.2"


@pytest.mark.parametrize("name", sorted(_MODELS))
def test_round_trip_gives_identical_outputs(name, recorded, monkeypatch):
    build, shapes = _MODELS[name]
    rng = np.random.default_rng(3)
    model = build(rng)
    fresh, exported = _exported(model, recorded)
    loaded = _imported_session(model, exported, monkeypatch)
    groups = epoxy_ep_openvino.stats(loaded)["groups"]
    # (capability still compiles each group itself: see the README's "Ahead-of-time compile")
    assert {g["label"] for g in groups if g["imported"]} == set(exported), groups
    assert "imported from compiled blobs" in epoxy_ep_openvino.stats(loaded)["summary"]
    assert set(loaded.partition_report().summary()) == {"openvino"}
    for shape in shapes:
        x = rng.standard_normal(shape).astype(np.float32)
        for _ in range(SPECIALIZE_AFTER + 1):  # dynamic groups: the specialization is built again
            want = fresh.run(None, {"x": x})
            got = loaded.run(None, {"x": x})
            assert len(got) == len(want)
            for a, b in zip(got, want):
                assert a.dtype == b.dtype and a.shape == b.shape
                assert np.array_equal(a, b), f"{name}: imported kernel differs from the fresh compile"
            epoxy_ep_openvino.openvino_provider(loaded).wait_for_specializations(60)


def test_dynamic_group_exports_the_dynamic_model_and_specializes_again(recorded, monkeypatch):
    model = _dynamic_mlp(np.random.default_rng(1))
    _, exported = _exported(model, recorded)
    (subgraph, artifact), = exported.values()
    header, _ = artifacts.unpack(artifact.blob)
    assert header["inputs"] == list(subgraph.inputs) and header["outputs"] == list(subgraph.outputs)
    loaded = _imported_session(model, exported, monkeypatch)
    provider = epoxy_ep_openvino.openvino_provider(loaded)
    x = np.ones((4, 16), np.float32)
    for _ in range(SPECIALIZE_AFTER):
        loaded.run(None, {"x": x})
    provider.wait_for_specializations(60)
    loaded.run(None, {"x": x})
    specs = epoxy_ep_openvino.stats(loaded)["specializations"]
    assert specs and specs[0]["compiled"] == 1 and specs[0]["specialized_runs"] == 1, specs


def test_export_of_a_foreign_kernel_is_none(cnn_artifact):
    subgraph, _ = cnn_artifact
    assert _provider().export_compiled(lambda *a: a, subgraph) is None


def test_thread_count_is_not_compared(cnn_artifact):
    """num_threads only steers the run: a blob compiled at another thread count is imported."""
    subgraph, artifact = cnn_artifact
    kernel = _provider(num_threads=1).import_compiled(subgraph, artifact)
    assert callable(kernel)


# -- refusals ----------------------------------------------------------------------------------
def test_refuses_another_openvino_version(cnn_artifact):
    subgraph, artifact = cnn_artifact
    _refused(_provider(), subgraph, _repacked(artifact, openvino="2024.0.0-1-old"), "openvino", "2024.0.0-1-old")


def test_refuses_another_device(cnn_artifact):
    subgraph, artifact = cnn_artifact
    _refused(_provider(), subgraph, _repacked(artifact, device="GPU.0"), "device", "GPU.0")
    _refused(_provider(), subgraph, _repacked(artifact, device_name="Some Other CPU"), "Some Other CPU")
    _refused(_provider(), subgraph, dataclasses.replace(artifact, target="GPU.0 (Intel Arc)"), "GPU.0 (Intel Arc)")


def test_refuses_other_options(cnn_artifact):
    subgraph, artifact = cnn_artifact
    _refused(_provider(precision="bf16"), subgraph, artifact, "other options", "INFERENCE_PRECISION_HINT")
    _refused(_provider(performance_hint="THROUGHPUT"), subgraph, artifact, "PERFORMANCE_HINT")
    changed = dict(artifact.options, INFERENCE_PRECISION_HINT="f16")
    _refused(_provider(), subgraph, dataclasses.replace(artifact, options=changed), "INFERENCE_PRECISION_HINT")
    options = dict(artifact.options, INFERENCE_PRECISION_HINT="f16")
    _refused(_provider(), subgraph, _repacked(artifact, options=options), "INFERENCE_PRECISION_HINT")


def test_refuses_another_format(cnn_artifact):
    subgraph, artifact = cnn_artifact
    _refused(_provider(), subgraph, dataclasses.replace(artifact, format="openvino.compiled_model/2"), "format")


@pytest.mark.parametrize("keep", [0, 10, 51, 200, -1])
def test_refuses_a_truncated_blob(cnn_artifact, keep):
    subgraph, artifact = cnn_artifact
    blob = artifact.blob[:keep] if keep >= 0 else artifact.blob[:-1]
    _refused(_provider(), subgraph, dataclasses.replace(artifact, blob=blob), "truncated")


def test_refuses_a_padded_blob(cnn_artifact):
    subgraph, artifact = cnn_artifact
    _refused(_provider(), subgraph, dataclasses.replace(artifact, blob=artifact.blob + b"\0"), "longer")


@pytest.mark.parametrize("where", ["magic", "layout", "reserved", "header_len", "payload_len", "digest", "header",
                                   "payload", "last"])
def test_refuses_one_flipped_byte(cnn_artifact, where):
    subgraph, artifact = cnn_artifact
    prefix = PREFIX_SIZE
    header_len = _header_len(artifact.blob)
    at = {"magic": 0, "layout": 8, "reserved": 10, "header_len": 12, "payload_len": 16, "digest": 40,
          "header": prefix + 3, "payload": prefix + header_len + (len(artifact.blob) - prefix - header_len) // 2,
          "last": len(artifact.blob) - 1}[where]
    blob = bytearray(artifact.blob)
    blob[at] ^= 0x01
    text = _refused(_provider(), subgraph, dataclasses.replace(artifact, blob=bytes(blob)))
    assert any(w in text for w in ("corrupted", "magic", "layout", "truncated", "longer")), text


def test_every_prefix_and_header_byte_is_checked(cnn_artifact):
    """No byte before the payload can change unnoticed (the digest covers the prefix's fields,
    header and payload; magic, layout and lengths are compared); without the digest (a
    trusted blob) every prefix field before it is still checked."""
    subgraph, artifact = cnn_artifact
    header_len = _header_len(artifact.blob)
    assert header_len > 100, "the header holds the identity and boundary"
    for at in range(PREFIX_SIZE + header_len):
        blob = bytearray(artifact.blob)
        blob[at] ^= 0x80
        with pytest.raises(ArtifactRefused):
            artifacts.unpack(bytes(blob))
        if at < PREFIX_SIZE - 32:
            with pytest.raises(ArtifactRefused):
                artifacts.unpack(bytes(blob), verify_digest=False)


@pytest.mark.parametrize("blob", [b"", b"not a compiled model", bytes(range(256)) * 64], ids=["empty", "text", "noise"])
def test_refuses_foreign_bytes(cnn_artifact, blob):
    subgraph, artifact = cnn_artifact
    _refused(_provider(), subgraph, dataclasses.replace(artifact, blob=blob))


def test_refuses_openvinos_raw_export(cnn_artifact):
    """OpenVINO's own blob without our header: not ours, refused before OpenVINO parses it."""
    subgraph, artifact = cnn_artifact
    _, payload = artifacts.unpack(artifact.blob)
    _refused(_provider(), subgraph, dataclasses.replace(artifact, blob=bytes(payload)), "not an ep-openvino blob")


def test_a_valid_envelope_around_garbage_is_refused_by_openvino(cnn_artifact):
    """Past our checks (a digest made over garbage), OpenVINO's refusal becomes ArtifactRefused."""
    subgraph, artifact = cnn_artifact
    header, _ = artifacts.unpack(artifact.blob)
    mine = aot.identity(_provider())
    boundary = {k: header[k] for k in ("inputs", "outputs", "in_ports", "out_ports")}
    forged = dataclasses.replace(artifact, blob=artifacts.pack(mine, boundary, b"\x00garbage" * 100))
    _refused(_provider(), subgraph, forged, "openvino could not import")


def test_refuses_a_blob_of_another_group(cnn_artifact, recorded):
    _, artifact = cnn_artifact
    _, exported = _exported(_dynamic_mlp(np.random.default_rng(2)), recorded)
    (other_subgraph, _), = exported.values()
    _refused(_provider(), other_subgraph, artifact, "group with inputs")


def test_untrusted_blob_for_a_kernel_device_is_refused(cnn_artifact):
    subgraph, artifact = cnn_artifact
    provider = _provider()
    provider.ov_device = "GPU.0"  # a device whose blobs hold compiled kernels
    assert not artifacts.data_only("GPU.0") and artifacts.data_only("CPU")
    _refused(provider, subgraph, artifact, "not signed")


def test_untrusted_cpu_blob_is_accepted(cnn_artifact):
    subgraph, artifact = cnn_artifact
    assert artifact.trusted is False
    assert callable(_provider().import_compiled(subgraph, artifact))


def test_refusal_is_an_artifact_refused_and_a_compiled_artifact_is_plain_data(cnn_artifact):
    _, artifact = cnn_artifact
    assert isinstance(artifact, CompiledArtifact) and isinstance(artifact.blob, bytes)
    assert artifact.target.startswith("CPU (") and artifact.options["INFERENCE_PRECISION_HINT"] == "f32"
    assert "INFERENCE_NUM_THREADS" not in artifact.options and "CACHE_DIR" not in artifact.options


def test_trusted_blob_skips_only_the_digest(cnn_artifact):
    """A trusted blob's bytes were checked by the core against its signed record: its digest is
    not hashed again, but a cut or foreign one is still refused before OpenVINO sees it."""
    subgraph, artifact = cnn_artifact
    trusted = dataclasses.replace(artifact, trusted=True)
    assert callable(_provider().import_compiled(subgraph, trusted))
    _refused(_provider(), subgraph, dataclasses.replace(trusted, blob=trusted.blob[:-1]), "truncated")
    _refused(_provider(), subgraph, dataclasses.replace(trusted, blob=b"x" * 100), "magic")
    blob = bytearray(artifact.blob)
    blob[-1] ^= 0x01
    assert artifacts.unpack(bytes(blob), verify_digest=False)[1][-1] == blob[-1]
    _refused(_provider(), subgraph, dataclasses.replace(artifact, blob=bytes(blob)), "corrupted")
