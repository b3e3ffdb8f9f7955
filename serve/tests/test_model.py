"""The engine-neutral pieces, without any server: ServedModel's checks and request merging (equal
to one run per request, a bad request answered alone), its thread count, the split of cores
among replicas, and model repository discovery."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest
from conftest import make_cnn, make_mlp, make_pair, write_repository

import epoxy
from epoxy_serve import BadRequest, ModelNotFound, ServedModel, discover
from epoxy_serve.config import ServeConfig, threads_per_replica

RNG = np.random.default_rng(5)


def _images(n: int) -> np.ndarray:
    return RNG.standard_normal((n, 3, 16, 16)).astype(np.float32)


def test_merged_requests_equal_one_run_each() -> None:
    model = ServedModel("cnn", make_cnn())
    assert model.batchable and model.batch_refusal is None
    requests = [{"image": _images(n)} for n in (1, 3, 2)]
    direct = epoxy.InferenceSession(make_cnn(), providers=["cpu"])
    replies = model.infer_batch(requests)
    for request, reply in zip(requests, replies):
        want = direct.run(None, request)[0]
        assert reply["logits"].shape == want.shape
        np.testing.assert_allclose(reply["logits"], want, rtol=1e-5, atol=1e-6)


def test_a_bad_request_in_a_batch_gets_its_own_error() -> None:
    model = ServedModel("cnn", make_cnn())
    requests = [{"image": _images(1)}, {"image": _images(1).astype(np.float64)}, {"picture": _images(1)}]
    good, wrong_dtype, wrong_name = model.infer_batch(requests)
    assert good["logits"].shape == (1, 10)
    assert isinstance(wrong_dtype, BadRequest) and "'image'" in str(wrong_dtype) and "FP64" in str(wrong_dtype)
    assert isinstance(wrong_name, BadRequest) and "'picture'" in str(wrong_name)


def test_two_input_requests_merge_and_split_back() -> None:
    model = ServedModel("pair", make_pair())
    a, b = RNG.standard_normal((2, 4)).astype(np.float32), RNG.standard_normal((3, 4)).astype(np.float32)
    replies = model.infer_batch([{"a": a, "b": a}, {"a": b, "b": b}])
    np.testing.assert_allclose(replies[0]["sum"], a + 2 * a, rtol=1e-6)
    np.testing.assert_allclose(replies[1]["sum"], b + 2 * b, rtol=1e-6)


def test_fixed_batch_models_say_why_they_do_not_merge() -> None:
    model = ServedModel("mlp", make_mlp(batch=1))
    assert not model.batchable and "fixed first dim 1" in (model.batch_refusal or "")


def test_checks_name_the_input_and_what_was_expected() -> None:
    model = ServedModel("cnn", make_cnn())
    with pytest.raises(BadRequest, match=r"missing input 'image'.*FP32"):
        model.infer({})
    with pytest.raises(BadRequest, match=r"input 'image': shape \[1, 3, 8, 8\].*\[-1, 3, 16, 16\]"):
        model.infer({"image": RNG.standard_normal((1, 3, 8, 8)).astype(np.float32)})


def test_threads_reach_the_session() -> None:
    model = ServedModel("cnn", make_cnn(), threads=1)
    assert model.session.get_session_options().intra_op_num_threads == 1
    assert ServedModel("cnn", make_cnn()).session.get_session_options().intra_op_num_threads == 0


def _runs(monkeypatch: pytest.MonkeyPatch, fail_at: int | None = None) -> list[tuple[int, ...]]:
    """The first input's shape of every session run from now on; runs of ``fail_at`` rows raise."""
    shapes: list[tuple[int, ...]] = []
    real = epoxy.InferenceSession.run

    def run(self, output_names, feeds, *args, **kwargs):  # type: ignore[no-untyped-def]
        shape = next(iter(feeds.values())).shape
        shapes.append(shape)
        if fail_at is not None and shape[0] == fail_at:
            raise RuntimeError("out of memory on this batch")
        return real(self, output_names, feeds, *args, **kwargs)

    monkeypatch.setattr(epoxy.InferenceSession, "run", run)
    return shapes


def test_warm_up_runs_every_batch_size_once_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    runs = _runs(monkeypatch)
    model = ServedModel("cnn", make_cnn(), warmup_batches=4)
    assert runs == [(b, 3, 16, 16) for b in (1, 2, 3, 4)]
    assert model.warmup_note.startswith("batch sizes 1-4 in ")
    runs.clear()
    assert ServedModel("cnn", make_cnn()).warmup_note == "off" and runs == []  # off unless asked


def test_warm_up_of_a_fixed_batch_model_runs_its_one_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    runs = _runs(monkeypatch)
    model = ServedModel("mlp", make_mlp(), warmup_batches=8)  # batch fixed at 1: cannot merge
    assert runs == [(1, 16)] and model.warmup_note.startswith("its fixed shapes in ")


def test_warm_up_skips_inputs_whose_other_dims_are_the_clients(monkeypatch: pytest.MonkeyPatch) -> None:
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "seq",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "L"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "L"])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    runs = _runs(monkeypatch)
    model = ServedModel("seq", proto.SerializeToString(), warmup_batches=4)
    assert runs == [] and model.warmup_note == ("skipped: input 'x' has a dim that is not fixed after the batch "
                                                "axis ([-1, -1])")


def test_a_failed_warm_up_stops_there_and_the_model_still_serves(monkeypatch: pytest.MonkeyPatch) -> None:
    runs = _runs(monkeypatch, fail_at=3)
    model = ServedModel("cnn", make_cnn(), warmup_batches=6)
    assert [r[0] for r in runs] == [1, 2, 3]
    assert model.warmup_note == "stopped at batch 3: RuntimeError: out of memory on this batch"
    assert model.infer({"image": _images(2)})["logits"].shape == (2, 10)


def test_warmup_batches_follow_the_config() -> None:
    from epoxy_serve.cli import add_arguments, config_from_args

    assert ServeConfig(model="m.onnx", max_batch_size=16).warmup_batches == 16
    assert ServeConfig(model="m.onnx").warmup_batches == 1  # unbatched: the single request's shape
    assert ServeConfig(model="m.onnx", max_batch_size=16, warmup=False).warmup_batches == 0
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert config_from_args(parser.parse_args(["m.onnx"])).warmup
    assert not config_from_args(parser.parse_args(["m.onnx", "--no-warmup"])).warmup


@pytest.mark.parametrize(("replicas", "cpus", "want"), [(1, 8, 8), (2, 8, 4), (3, 8, 2), (16, 8, 1), (0, 2, 2)])
def test_replicas_split_the_cores(replicas: int, cpus: int, want: int) -> None:
    assert threads_per_replica(replicas, cpus) == want


def test_repository_layouts(tmp_path: Path) -> None:
    found = discover(write_repository(tmp_path / "repo", pair=True))
    assert [(s.name, s.version) for s in found] == [("cnn", "1"), ("mlp", "1"), ("mlp", "2"), ("pair", "1")]
    flat = tmp_path / "flat"
    (flat / "net").mkdir(parents=True)
    (flat / "solo.onnx").write_bytes(make_cnn())
    (flat / "net" / "model.onnx").write_bytes(make_cnn())
    assert [(s.name, s.version) for s in discover(flat)] == [("net", "1"), ("solo", "1")]
    assert [(s.name, s.version) for s in discover(flat / "solo.onnx", "renamed")] == [("renamed", "1")]


def test_repository_errors_say_what_was_expected(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFound, match="no such file"):
        discover(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelNotFound, match="NAME/VERSION/model.onnx"):
        discover(tmp_path / "empty")
    with pytest.raises(ModelNotFound, match="--name renames a single model file"):
        discover(write_repository(tmp_path / "repo"), "x")
