"""The engine-neutral pieces, without any server: ServedModel's checks and request merging (equal
to one run per request, a bad request answered alone), its thread count, the split of cores
among replicas, and model repository discovery."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import make_cnn, make_mlp, make_pair, write_repository

import epoxy
from epoxy_serve import BadRequest, ModelNotFound, ServedModel, discover
from epoxy_serve.config import threads_per_replica

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
