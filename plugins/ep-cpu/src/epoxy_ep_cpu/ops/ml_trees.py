"""ai.onnx.ml legacy tree ensembles: TreeEnsembleRegressor (1, 3), TreeEnsembleClassifier
(1, 3) — the form skl2onnx, onnxmltools (LightGBM, XGBoost) and most converters write.

Both compile into the shared :class:`~._forest.Forest` evaluator (TreeEnsemble 5 uses it
too). Scores follow onnxruntime, including its binary-classification conventions, so that
models exported against it give the same labels and probabilities here:

* a regressor with one target applies only PROBIT (LOGISTIC and the softmaxes leave a
  single score as it is), and every reached leaf counts with its first weight (0 when it has
  none, which matters for MIN and MAX); with several targets a target no reached leaf
  weighs is 0, without its base value;
* a classifier with two labels whose leaves all vote for one class id keeps one score
  ``s`` and reports ``[1 - s, s]`` (all weights >= 0; label 1 when ``s > 0.5``) or
  ``[-s, s]`` (some weight < 0; label 1 when ``s > 0``), LOGISTIC giving
  ``[1 - σ(s), σ(s)]`` and ``[σ(-s), σ(s)]``;
* a class that no reached leaf votes for scores 0 (and is never the top class), and with two
  labels and two base values the class-1 score becomes ``base[1] + score[0]`` with
  ``score[0] = -score[1]``;
* with two labels whose leaves vote for both classes the label is ``labels[1]`` when the
  class-1 score is > 0 (onnxruntime answers 1 / 0 for integer labels there, and so do we).

Comparisons run in float32 for float32 and integer inputs and in float64 for float64
inputs, as onnxruntime's threshold types do.
"""

from __future__ import annotations

import numpy as np

from epoxy.contract import NodeSpec
from epoxy.kit import Unsupported

from ..registry import KERNELS
from . import _ml_common as mlc
from ._forest import AVERAGE, LEAF, MAX, MIN, MODE_NAMES, SUM, Forest
from ._util import as_text

_AGGREGATES = {"SUM": SUM, "AVERAGE": AVERAGE, "MIN": MIN, "MAX": MAX}


def _legacy_forest(node: NodeSpec, prefix: str, n_targets: int) -> Forest:
    """Compile the ``nodes_*`` and ``{prefix}_*`` leaf attributes into a Forest."""
    op = node.op_type
    tree_ids = mlc.ints(node, "nodes_treeids")
    node_ids = mlc.ints(node, "nodes_nodeids")
    n = node_ids.size
    feature = mlc.ints(node, "nodes_featureids")
    names = [as_text(m) for m in (node.attr("nodes_modes") or ())]
    unknown = sorted(set(names) - set(MODE_NAMES))
    if unknown:
        raise Unsupported(f"{op}: unknown nodes_modes {unknown}")
    mode = np.asarray([MODE_NAMES[m] for m in names], dtype=np.int64)
    values = mlc.floats_or_tensor(node, "nodes_values")
    threshold = values if values is not None else np.zeros(n)
    true_ids = mlc.ints(node, "nodes_truenodeids")
    false_ids = mlc.ints(node, "nodes_falsenodeids")
    missing = mlc.ints(node, "nodes_missing_value_tracks_true")
    if missing.size == 0:
        missing = np.zeros(n, dtype=np.int64)
    for name, arr in (("nodes_treeids", tree_ids), ("nodes_featureids", feature), ("nodes_modes", mode),
                      ("nodes_values", threshold), ("nodes_truenodeids", true_ids),
                      ("nodes_falsenodeids", false_ids), ("nodes_missing_value_tracks_true", missing)):
        if arr.size != n:
            raise Unsupported(f"{op}: {name} has {arr.size} entries for {n} nodes")

    # (tree id, node id) -> position in the node lists
    keys = _pair_keys(tree_ids, node_ids)
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    if np.any(sorted_keys[1:] == sorted_keys[:-1]):
        raise Unsupported(f"{op}: a (tree id, node id) pair appears twice")

    def locate(trees: np.ndarray, ids: np.ndarray, what: str) -> np.ndarray:
        k = _pair_keys(trees, ids)
        pos = np.minimum(np.searchsorted(sorted_keys, k), max(n - 1, 0))
        if k.size and (n == 0 or np.any(sorted_keys[pos] != k)):
            raise Unsupported(f"{op}: {what} names a node that does not exist")
        return order[pos] if n else pos

    branch = mode != LEAF
    true_child = np.zeros(n, dtype=np.int64)
    false_child = np.zeros(n, dtype=np.int64)
    true_child[branch] = locate(tree_ids[branch], true_ids[branch], "nodes_truenodeids")
    false_child[branch] = locate(tree_ids[branch], false_ids[branch], "nodes_falsenodeids")
    # a tree's root is the node no branch points to (one per tree in valid models)
    is_child = np.zeros(n, dtype=bool)
    is_child[true_child[branch]] = True
    is_child[false_child[branch]] = True
    roots = np.nonzero(~is_child)[0]

    leaf_trees = mlc.ints(node, f"{prefix}_treeids")
    leaf_nodes = mlc.ints(node, f"{prefix}_nodeids")
    leaf_targets = mlc.ints(node, f"{prefix}_ids")
    w = mlc.floats_or_tensor(node, f"{prefix}_weights")
    weights = w if w is not None else np.zeros(leaf_nodes.size)
    if not (leaf_trees.size == leaf_nodes.size == leaf_targets.size == weights.size):
        raise Unsupported(f"{op}: the {prefix}_* attributes have different lengths")
    return Forest(
        op=op,
        roots=roots,
        feature=feature,
        threshold=threshold,
        mode=mode,
        true_child=true_child,
        false_child=false_child,
        missing_true=missing.astype(bool),
        leaf_node=locate(leaf_trees, leaf_nodes, f"{prefix}_nodeids"),
        leaf_target=leaf_targets,
        leaf_weight=weights,
        n_targets=n_targets,
        every_leaf_scores=True,
    )


def _pair_keys(trees: np.ndarray, ids: np.ndarray) -> np.ndarray:
    if trees.size and (trees.min() < 0 or ids.min() < 0 or trees.max() >= 2**31 or ids.max() >= 2**31):
        raise Unsupported("tree ensemble: tree and node ids must be in 0..2**31-1")
    return (trees.astype(np.int64) << 32) | ids.astype(np.int64)


def _features(x: np.ndarray, op: str) -> np.ndarray:
    """Rows to compare: float64 stays float64, every other type is read as float32."""
    a = np.asarray(x)
    return mlc.feature_matrix(a, op, np.float64 if a.dtype == np.float64 else np.float32)


def _base_values(node: NodeSpec, allowed: tuple[int, ...]) -> np.ndarray:
    base = mlc.floats_or_tensor(node, "base_values")
    base = np.zeros(0) if base is None else base
    if base.size not in allowed:
        raise Unsupported(
            f"{node.op_type}: base_values has {base.size} entries, expected one of {sorted(set(allowed))}"
        )
    return base


# --------------------------------------------------------------------------- regressor


@KERNELS.register("TreeEnsembleRegressor", (1, 3), domain=mlc.ML)
def tree_ensemble_regressor(node: NodeSpec):
    n_targets = int(node.attr("n_targets", 1))
    aggregate = as_text(node.attr("aggregate_function", "SUM")).upper()
    if aggregate not in _AGGREGATES:
        raise Unsupported(f"TreeEnsembleRegressor: aggregate_function {aggregate!r} is not supported")
    how = _AGGREGATES[aggregate]
    post = mlc.post_transform(node)
    forest = _legacy_forest(node, "target", n_targets)
    base = _base_values(node, (0, n_targets))

    def run(x: np.ndarray) -> np.ndarray:
        agg = forest.aggregate(_features(x, node.op_type), how)
        scores = agg.values
        if base.size:
            # onnxruntime leaves a target that no reached leaf weighs at 0, without its base
            scores = np.where(agg.has, scores + base, 0.0)
        return mlc.apply_regression_transform(scores, post).astype(np.float32)

    return run


# --------------------------------------------------------------------------- classifier


@KERNELS.register("TreeEnsembleClassifier", (1, 3), domain=mlc.ML)
def tree_ensemble_classifier(node: NodeSpec):
    labels = mlc.class_labels(node, "classlabels_int64s")
    k = labels.size
    if k == 0:
        raise Unsupported("TreeEnsembleClassifier: needs classlabels_int64s or classlabels_strings")
    post = mlc.post_transform(node)
    forest = _legacy_forest(node, "class", k)
    base = _base_values(node, (0, k, 1) if k <= 2 else (0, k))
    class_ids = mlc.ints(node, "class_ids")
    weights = mlc.floats_or_tensor(node, "class_weights")
    binary_case = k == 2 and np.unique(class_ids).size == 1
    all_positive = weights is None or bool(np.all(weights >= 0))
    is_str = labels.dtype == object

    def run(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        agg = forest.aggregate(_features(x, node.op_type), SUM)
        if k > 2:
            return _multiclass(agg.values, agg.has, labels, base, post)
        if k == 1:
            score = agg.values[:, 0] + (base[0] if base.size else 0.0)
            label = labels[np.zeros(score.shape, np.int64)] if is_str else (score > 0).astype(np.int64)
            z = mlc.probit(score) if post == mlc.PROBIT else score
            return label, z.reshape(-1, 1).astype(np.float32)
        return _binary(agg.values, agg.has, labels, base, post, binary_case, all_positive)

    return run


def _multiclass(values: np.ndarray, has: np.ndarray, labels: np.ndarray, base: np.ndarray,
                post: int) -> tuple[np.ndarray, np.ndarray]:
    if base.size:
        values = values + base
        has = np.ones_like(has)
    # the top class among those some leaf (or a base value) scored; first one on ties
    best = np.argmax(np.where(has, values, -np.inf), axis=1)
    return labels[best], mlc.apply_transform(values, post).astype(np.float32)


def _binary(values: np.ndarray, has: np.ndarray, labels: np.ndarray, base: np.ndarray, post: int,
            binary_case: bool, all_positive: bool) -> tuple[np.ndarray, np.ndarray]:
    s0, s1 = values[:, 0].copy(), values[:, 1].copy()
    h0, h1 = has[:, 0], has[:, 1]
    if base.size == 2:
        single = np.zeros(s0.shape, dtype=bool)
        # onnxruntime's reading of two base values: score1 = base1 + score0, score0 = -score1
        # when class 1 was scored; each class its own base value otherwise
        t1 = base[1] + s0
        s0 = np.where(h1, -t1, s0 + base[0])
        s1 = np.where(h1, t1, s1 + base[1])
    else:
        if base.size == 1:
            s0 = s0 + base[0]
        single = ~h1
    s0 = np.where(h0, s0, 0.0)
    s1 = np.where(h1, s1, 0.0)
    positive = np.where(h1, s1, s0)
    if binary_case:
        up = positive > 0.5 if all_positive else positive > 0
        label = np.where(up, labels[1], labels[0])
    else:
        up = positive > 0
        # onnxruntime answers 1 / 0 here, not the labels, when they are integers
        label = np.where(up, labels[1], labels[0]) if labels.dtype == object else up.astype(np.int64)
    z = np.empty((s0.size, 2), dtype=np.float64)
    pair = ~single
    if pair.any():
        z[pair] = mlc.apply_transform(np.stack([s0[pair], s1[pair]], axis=1), post)
    if single.any():
        z[single] = _single_score(s0[single], post, binary_case, all_positive, base.size)
    return label.astype(labels.dtype), z.astype(np.float32)


def _single_score(s: np.ndarray, post: int, binary_case: bool, all_positive: bool, n_base: int) -> np.ndarray:
    """Two columns from the one score of a binary classifier, as onnxruntime writes them:
    ``[1 - s, s]`` when the leaves all vote for one class with weights >= 0, else
    ``[-s, s]`` (LOGISTIC: of ``σ(s)``, and ``[σ(-s), σ(s)]``)."""
    zero = np.zeros_like(s)
    if post == mlc.PROBIT:
        # onnxruntime fills only the first column here (the second is whatever its buffer
        # held); we leave it at 0
        return np.stack([mlc.probit(s), zero], axis=1)
    if not binary_case and n_base == 1:
        # votes for both classes and one base value: onnxruntime writes the bare score
        return np.stack([s, zero], axis=1)
    if binary_case and all_positive:
        t = mlc.logistic(s) if post == mlc.LOGISTIC else s
        return np.stack([1.0 - t, t], axis=1)
    if post == mlc.LOGISTIC:
        return np.stack([mlc.logistic(-s), mlc.logistic(s)], axis=1)
    return np.stack([-s, s], axis=1)
