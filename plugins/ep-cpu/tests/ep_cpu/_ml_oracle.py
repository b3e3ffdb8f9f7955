"""Shared by the ai.onnx.ml tests (test_ml_linear, test_ml_svm, test_ml_trees,
test_ml_preprocess): one-node models built with onnx.helper, run through epoxy and
onnxruntime (the oracle: ONNX-ML models are exported against it), outputs compared in dtype,
shape and value."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import epoxy

ML = "ai.onnx.ml"
F, D, I64, S = TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.INT64, TensorProto.STRING
POST_TRANSFORMS = ("NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO", "PROBIT")
MODES = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ")


def elem_type(a: np.ndarray) -> int:
    return S if a.dtype == object else helper.np_dtype_to_tensor_dtype(a.dtype)


def ml_model(op: str, feeds: dict[str, np.ndarray], outputs: list[tuple[str, int]], attrs: dict[str, Any],
             ml_opset: int = 1) -> onnx.ModelProto:
    """A one-node ai.onnx.ml model reading ``feeds`` and writing ``outputs`` (name, elem type)."""
    inputs = [helper.make_tensor_value_info(k, elem_type(v), [None] * v.ndim) for k, v in feeds.items()]
    node = helper.make_node(op, list(feeds), [name for name, _ in outputs], domain=ML, **attrs)
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info(n, t, None) for n, t in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ML, ml_opset)])
    model.ir_version = 8
    return model


def run_epoxy(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return epoxy.InferenceSession(model, providers=["cpu"]).run(None, feeds)


def run_ort(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    ort = pytest.importorskip("onnxruntime")
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def assert_same(got: list[np.ndarray], expected: list[np.ndarray], rtol: float = 1e-5, atol: float = 1e-6,
                ignore: dict[int, np.ndarray] | None = None) -> None:
    """Labels (int or string) equal, scores close; ``ignore[i]`` masks cells of output ``i``
    that onnxruntime leaves unwritten (the value there is whatever its buffer held)."""
    assert len(got) == len(expected)
    for i, (g, e) in enumerate(zip(got, expected)):
        assert g.dtype == e.dtype, (i, g.dtype, e.dtype)
        assert g.shape == e.shape, (i, g.shape, e.shape)
        if g.dtype == object or g.dtype.kind in "iub":
            np.testing.assert_array_equal(g, e, err_msg=f"output {i}")
            continue
        g64, e64 = g.astype(np.float64), e.astype(np.float64)
        if ignore and i in ignore:
            e64 = np.where(ignore[i], g64, e64)
        np.testing.assert_allclose(g64, e64, rtol=rtol, atol=atol, err_msg=f"output {i}")


def check(op: str, feeds: dict[str, np.ndarray], outputs: list[tuple[str, int]], attrs: dict[str, Any],
          ml_opset: int = 1, rtol: float = 1e-5, atol: float = 1e-6, ignore_probit_second: bool = False,
          post: str | None = None, ignore_zero_second: bool = False) -> list[np.ndarray]:
    """Run ``op`` through epoxy and onnxruntime and compare; returns epoxy's outputs.

    PROBIT (onnxruntime's float32 closed-form erfinv) loses digits near p = 0.5 and 1, so
    probit scores get ``atol=2e-3``. ``ignore_probit_second`` skips the second score column
    where epoxy wrote 0 under PROBIT: onnxruntime leaves it unwritten for a binary model's
    single score; ``ignore_zero_second`` does so whatever the transform."""
    model = ml_model(op, feeds, outputs, attrs, ml_opset)
    got = run_epoxy(model, feeds)
    expected = run_ort(model, feeds)
    post = post or str(attrs.get("post_transform", "NONE"))
    ignore = None
    if post == "PROBIT":
        atol = max(atol, 2e-3)
        rtol = max(rtol, 1e-3)
        ignore_zero_second = ignore_zero_second or ignore_probit_second
    if ignore_zero_second and got[-1].ndim == 2 and got[-1].shape[1] == 2:
        mask = np.zeros(got[-1].shape, dtype=bool)
        mask[:, 1] = got[-1][:, 1] == 0
        ignore = {len(got) - 1: mask}
    assert_same(got, expected, rtol=rtol, atol=atol, ignore=ignore)
    return got


def features(rng: np.random.Generator, n: int, f: int, dtype: type = np.float32, nan: float = 0.0) -> np.ndarray:
    """Rows of N(0, 1) values, a fifth of them small integers (so equality splits fire),
    ``nan`` of them NaN; integer dtypes get rounded values."""
    x = rng.normal(size=(n, f))
    x = np.where(rng.random((n, f)) < 0.2, rng.integers(-2, 3, size=(n, f)).astype(float), x)
    if nan:
        x[rng.random((n, f)) < nan] = np.nan
    if np.dtype(dtype).kind in "iu":
        x = np.nan_to_num(x * 2).round()
    return x.astype(dtype)


def random_forest(rng: np.random.Generator, *, trees: int, depth: int, features: int, modes: tuple[str, ...],
                  targets: int, prefix: str, weights: str = "mixed", votes: str = "one",
                  leaf_prob: float = 0.25) -> dict[str, Any]:
    """Legacy tree-ensemble attributes (``nodes_*`` and ``{prefix}_*``) of a random forest.

    Tree ids are spaced (0, 3, 6...), node ids run breadth first from 0 in each tree.
    ``votes``: ``one`` (tree t votes for target t % targets), ``all`` (every leaf for every
    target), ``fixed`` (every leaf for the last target), ``random`` (0-2 random targets per
    leaf, so some leaves carry no weight). ``weights``: ``mixed`` signs or ``positive``."""
    keys = ("nodes_treeids", "nodes_nodeids", "nodes_featureids", "nodes_modes", "nodes_values",
            "nodes_truenodeids", "nodes_falsenodeids", "nodes_missing_value_tracks_true")
    a: dict[str, list] = {k: [] for k in keys + (f"{prefix}_treeids", f"{prefix}_nodeids", f"{prefix}_ids",
                                                f"{prefix}_weights")}
    for t in range(trees):
        tree_id = 3 * t
        queue = [(0, 0)]
        next_id = 1
        while queue:
            node, level = queue.pop(0)
            if level < depth and (level == 0 or rng.random() > leaf_prob):
                mode = modes[int(rng.integers(len(modes)))]
                exact = mode in ("BRANCH_EQ", "BRANCH_NEQ") or rng.random() < 0.3
                value = float(rng.integers(-2, 3)) if exact else float(np.float32(rng.normal()))
                row = (tree_id, node, int(rng.integers(features)), mode, value, next_id, next_id + 1,
                       int(rng.random() < 0.5))
                queue += [(next_id, level + 1), (next_id + 1, level + 1)]
                next_id += 2
            else:
                row = (tree_id, node, 0, "LEAF", 0.0, 0, 0, 0)
                if votes == "one":
                    ids = [t % targets]
                elif votes == "all":
                    ids = list(range(targets))
                elif votes == "fixed":
                    ids = [targets - 1]
                else:
                    ids = sorted(set(rng.integers(targets, size=int(rng.integers(0, 3))).tolist()))
                for c in ids:
                    a[f"{prefix}_treeids"].append(tree_id)
                    a[f"{prefix}_nodeids"].append(node)
                    a[f"{prefix}_ids"].append(c)
                    w = float(rng.normal()) if weights == "mixed" else float(rng.random())
                    a[f"{prefix}_weights"].append(w)
            for k, v in zip(keys, row):
                a[k].append(v)
    return a
