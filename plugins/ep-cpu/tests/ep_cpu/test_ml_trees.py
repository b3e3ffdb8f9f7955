"""Legacy tree ensembles (TreeEnsembleRegressor / TreeEnsembleClassifier, ml opsets 1 and 3)
and the shared evaluator behind them and TreeEnsemble (ml opset 5), against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from _ml_oracle import (
    I64,
    MODES,
    POST_TRANSFORMS,
    F,
    S,
    check,
    features,
    ml_model,
    random_forest,
    run_epoxy,
    run_ort,
)
from onnx import numpy_helper

pytest.importorskip("onnxruntime")


# ----------------------------------------------------------------------------- regressor


@pytest.mark.parametrize("aggregate", ["SUM", "AVERAGE", "MIN", "MAX"])
@pytest.mark.parametrize("targets", [1, 3])
@pytest.mark.parametrize("post", POST_TRANSFORMS)
def test_regressor_aggregates_and_post_transforms(aggregate: str, targets: int, post: str) -> None:
    rng = np.random.default_rng(10)
    attrs = random_forest(rng, trees=5, depth=4, features=4, modes=MODES, targets=targets, prefix="target",
                          votes="random")
    attrs.update(n_targets=targets, aggregate_function=aggregate, post_transform=post)
    x = features(rng, 60, 4, nan=0.1)
    check("TreeEnsembleRegressor", {"X": x}, [("Y", F)], attrs)


@pytest.mark.parametrize("aggregate", ["SUM", "AVERAGE", "MIN", "MAX"])
@pytest.mark.parametrize("targets", [1, 2])
def test_regressor_base_values_and_unscored_targets(aggregate: str, targets: int) -> None:
    # "random" votes leave some targets without any reached weight: onnxruntime gives those 0
    # (no base value); with one target every leaf counts, weightless ones as 0
    rng = np.random.default_rng(11)
    attrs = random_forest(rng, trees=4, depth=3, features=3, modes=("BRANCH_LEQ",), targets=targets,
                          prefix="target", votes="random")
    attrs.update(n_targets=targets, aggregate_function=aggregate, base_values=rng.normal(size=targets).tolist())
    check("TreeEnsembleRegressor", {"X": features(rng, 50, 3)}, [("Y", F)], attrs)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("nan", [0.0, 0.2])
def test_regressor_single_mode_and_missing_values(mode: str, dtype: type, nan: float) -> None:
    rng = np.random.default_rng(12)
    attrs = random_forest(rng, trees=6, depth=5, features=3, modes=(mode,), targets=1, prefix="target")
    attrs.update(n_targets=1)
    check("TreeEnsembleRegressor", {"X": features(rng, 80, 3, dtype, nan)}, [("Y", F)], attrs)


def test_regressor_as_tensor_attributes_double() -> None:
    rng = np.random.default_rng(13)
    attrs = random_forest(rng, trees=4, depth=4, features=3, modes=MODES, targets=2, prefix="target", votes="all")
    values = np.asarray(attrs.pop("nodes_values"), np.float64) + 1e-9  # not float32-representable
    weights = np.asarray(attrs.pop("target_weights"), np.float64) * (1 + 1e-12)
    attrs.update(n_targets=2, nodes_values_as_tensor=numpy_helper.from_array(values),
                 target_weights_as_tensor=numpy_helper.from_array(weights),
                 base_values_as_tensor=numpy_helper.from_array(np.array([0.25, -0.5])))
    x = features(rng, 60, 3, np.float64, nan=0.1)
    check("TreeEnsembleRegressor", {"X": x}, [("Y", F)], attrs, ml_opset=3)


def test_regressor_integer_input_and_one_row() -> None:
    rng = np.random.default_rng(14)
    attrs = random_forest(rng, trees=3, depth=3, features=2, modes=("BRANCH_LT",), targets=1, prefix="target")
    attrs.update(n_targets=1)
    x = features(rng, 30, 2, np.int64)
    # onnxruntime has no int64 kernel for this op; it reads other types as float32, which
    # makes its float32 run the oracle
    x32 = x.astype(np.float32)
    expected = run_ort(ml_model("TreeEnsembleRegressor", {"X": x32}, [("Y", F)], attrs), {"X": x32})[0]
    model = ml_model("TreeEnsembleRegressor", {"X": x}, [("Y", F)], attrs)
    np.testing.assert_allclose(run_epoxy(model, {"X": x})[0], expected, rtol=1e-6)
    one = run_epoxy(ml_model("TreeEnsembleRegressor", {"X": x[0]}, [("Y", F)], attrs), {"X": x[0]})[0]
    assert one.shape == (1, 1)
    np.testing.assert_allclose(one, expected[:1], rtol=1e-6)


# ----------------------------------------------------------------------------- classifier


def _classifier_attrs(rng: np.random.Generator, k: int, votes: str, weights: str, labels: str,
                      base: int, post: str) -> dict:
    attrs = random_forest(rng, trees=5, depth=4, features=3, modes=MODES, targets=k, prefix="class",
                          votes=votes, weights=weights)
    if labels == "strings":
        attrs["classlabels_strings"] = [f"c{i}" for i in range(k)]
    else:
        attrs["classlabels_int64s"] = list(range(2, 2 + 3 * k, 3))
    if base:
        attrs["base_values"] = rng.normal(size=base).tolist()
    attrs["post_transform"] = post
    return attrs


@pytest.mark.parametrize("votes", ["one", "fixed", "all", "random"])
@pytest.mark.parametrize("weights", ["mixed", "positive"])
@pytest.mark.parametrize("base", [0, 1, 2])
@pytest.mark.parametrize("post", POST_TRANSFORMS)
def test_binary_classifier_conventions(votes: str, weights: str, base: int, post: str) -> None:
    # "fixed" / "one" with two classes: the leaves vote for one class id, a single score;
    # "all": both classes scored; "random": some rows score only one of them (with one base
    # value onnxruntime then writes only the first column)
    rng = np.random.default_rng(20)
    attrs = _classifier_attrs(rng, 2, votes, weights, "ints", base, post)
    x = features(rng, 60, 3, nan=0.1)
    check("TreeEnsembleClassifier", {"X": x}, [("Y", I64), ("Z", F)], attrs, ignore_probit_second=True,
          ignore_zero_second=votes == "random" and base == 1)


@pytest.mark.parametrize("votes", ["fixed", "all", "random"])
@pytest.mark.parametrize("post", ["NONE", "LOGISTIC"])
def test_binary_classifier_string_labels(votes: str, post: str) -> None:
    rng = np.random.default_rng(21)
    attrs = _classifier_attrs(rng, 2, votes, "mixed", "strings", 0, post)
    got = check("TreeEnsembleClassifier", {"X": features(rng, 60, 3)}, [("Y", S), ("Z", F)], attrs)
    assert got[0].dtype == object and set(got[0].tolist()) <= {"c0", "c1"}


@pytest.mark.parametrize("k", [3, 5])
@pytest.mark.parametrize("votes", ["one", "all"])
@pytest.mark.parametrize("labels", ["ints", "strings"])
@pytest.mark.parametrize("post", POST_TRANSFORMS)
def test_multiclass_classifier(k: int, votes: str, labels: str, post: str) -> None:
    rng = np.random.default_rng(22)
    attrs = _classifier_attrs(rng, k, votes, "mixed", labels, 0, post)
    check("TreeEnsembleClassifier", {"X": features(rng, 60, 3)}, [("Y", S if labels == "strings" else I64), ("Z", F)],
          attrs)


@pytest.mark.parametrize("post", ["NONE", "SOFTMAX"])
def test_multiclass_classifier_base_values_and_unscored_classes(post: str) -> None:
    rng = np.random.default_rng(23)
    attrs = _classifier_attrs(rng, 4, "random", "mixed", "ints", 4, post)
    check("TreeEnsembleClassifier", {"X": features(rng, 60, 3)}, [("Y", I64), ("Z", F)], attrs)


def test_classifier_as_tensor_double_input() -> None:
    rng = np.random.default_rng(24)
    attrs = _classifier_attrs(rng, 3, "all", "positive", "ints", 3, "SOFTMAX")
    attrs["nodes_values_as_tensor"] = numpy_helper.from_array(np.asarray(attrs.pop("nodes_values"), np.float64))
    attrs["class_weights_as_tensor"] = numpy_helper.from_array(np.asarray(attrs.pop("class_weights"), np.float64))
    attrs["base_values_as_tensor"] = numpy_helper.from_array(np.asarray(attrs.pop("base_values"), np.float64))
    check("TreeEnsembleClassifier", {"X": features(rng, 40, 3, np.float64)}, [("Y", I64), ("Z", F)], attrs,
          ml_opset=3)


def test_single_class_classifier() -> None:
    rng = np.random.default_rng(25)
    attrs = _classifier_attrs(rng, 1, "all", "mixed", "ints", 1, "NONE")
    check("TreeEnsembleClassifier", {"X": features(rng, 40, 3)}, [("Y", I64), ("Z", F)], attrs)


# ----------------------------------------------------------------------------- the shared evaluator


def _naive_leaves(attrs: dict, x: np.ndarray) -> list[list[tuple[int, int]]]:
    """Per row, the (tree id, node id) of the leaf each tree reaches: one node at a time."""
    nodes = {(t, n): i for i, (t, n) in enumerate(zip(attrs["nodes_treeids"], attrs["nodes_nodeids"]))}
    ops = {"BRANCH_LEQ": np.less_equal, "BRANCH_LT": np.less, "BRANCH_GTE": np.greater_equal,
           "BRANCH_GT": np.greater, "BRANCH_EQ": np.equal, "BRANCH_NEQ": np.not_equal}
    out = []
    for row in x:
        reached = []
        for tree in sorted(set(attrs["nodes_treeids"])):
            i = nodes[(tree, 0)]
            while attrs["nodes_modes"][i] != "LEAF":
                v = row[attrs["nodes_featureids"][i]]
                t = np.float32(attrs["nodes_values"][i])
                go = bool(ops[attrs["nodes_modes"][i]](v, t)) or (
                    np.isnan(v) and attrs["nodes_missing_value_tracks_true"][i]
                )
                nxt = attrs["nodes_truenodeids"][i] if go else attrs["nodes_falsenodeids"][i]
                i = nodes[(tree, nxt)]
            reached.append((tree, attrs["nodes_nodeids"][i]))
        out.append(reached)
    return out


def test_vectorized_traversal_matches_one_row_at_a_time() -> None:
    from epoxy_ep_cpu.ops.ml_trees import _legacy_forest

    class _Node:  # the attribute view a kernel factory reads
        op_type = "TreeEnsembleRegressor"

        def __init__(self, attrs: dict) -> None:
            self.attributes = attrs

        def attr(self, name: str, default: object = None) -> object:
            return self.attributes.get(name, default)

    rng = np.random.default_rng(30)
    attrs = random_forest(rng, trees=7, depth=6, features=4, modes=MODES, targets=1, prefix="target")
    forest = _legacy_forest(_Node(attrs), "target", 1)  # type: ignore[arg-type]
    x = features(rng, 40, 4, nan=0.15)
    leaves = forest.leaves(x)
    ids = list(zip(attrs["nodes_treeids"], attrs["nodes_nodeids"]))
    got = [[ids[i] for i in row] for row in leaves.tolist()]
    assert got == _naive_leaves(attrs, x)


def test_many_rows_span_several_blocks() -> None:
    rng = np.random.default_rng(31)
    attrs = random_forest(rng, trees=40, depth=7, features=5, modes=("BRANCH_LEQ",), targets=2, prefix="target",
                          votes="all", leaf_prob=0.1)
    attrs.update(n_targets=2, aggregate_function="AVERAGE")
    x = features(rng, 20_000, 5, nan=0.05)  # > 2**18 / 40 rows: the evaluator's row blocks
    check("TreeEnsembleRegressor", {"X": x}, [("Y", F)], attrs)


def test_deep_chain_tree() -> None:
    # a 60-level chain: each node's false child is a leaf
    depth = 60
    attrs: dict = {k: [] for k in ("nodes_treeids", "nodes_nodeids", "nodes_featureids", "nodes_modes",
                                   "nodes_values", "nodes_truenodeids", "nodes_falsenodeids")}
    for level in range(depth):
        for k, v in zip(attrs, (0, 2 * level, 0, "BRANCH_GT", float(level), 2 * level + 2, 2 * level + 1)):
            attrs[k].append(v)
        for k, v in zip(attrs, (0, 2 * level + 1, 0, "LEAF", 0.0, 0, 0)):
            attrs[k].append(v)
    for k, v in zip(attrs, (0, 2 * depth, 0, "LEAF", 0.0, 0, 0)):
        attrs[k].append(v)
    leaves = [2 * level + 1 for level in range(depth)] + [2 * depth]
    attrs.update(target_treeids=[0] * len(leaves), target_nodeids=leaves, target_ids=[0] * len(leaves),
                 target_weights=[float(i) for i in range(len(leaves))], n_targets=1)
    x = np.arange(-1, depth + 2, 0.5, dtype=np.float32).reshape(-1, 1)
    got = check("TreeEnsembleRegressor", {"X": x}, [("Y", F)], attrs)
    np.testing.assert_array_equal(got[0][:, 0], np.clip(np.ceil(x[:, 0]), 0, depth))


def test_tree_ensemble_5_follows_onnxruntime_on_nan_and_one_target() -> None:
    # BRANCH_NEQ sends NaN to the true branch; one target ignores LOGISTIC
    attrs = {
        "n_targets": 1, "aggregate_function": 1, "post_transform": 2, "tree_roots": [0], "nodes_featureids": [0],
        "nodes_modes": numpy_helper.from_array(np.array([5], np.uint8)),
        "nodes_splits": numpy_helper.from_array(np.array([1.0], np.float32)),
        "nodes_truenodeids": [0], "nodes_trueleafs": [1], "nodes_falsenodeids": [1], "nodes_falseleafs": [1],
        "nodes_missing_value_tracks_true": [0], "leaf_targetids": [0, 0],
        "leaf_weights": numpy_helper.from_array(np.array([10.0, 20.0], np.float32)),
    }
    x = np.array([[np.nan], [1.0], [2.0]], np.float32)
    got = check("TreeEnsemble", {"X": x}, [("Y", F)], attrs, ml_opset=5, post="NONE")
    np.testing.assert_array_equal(got[0][:, 0], [10, 20, 10])
