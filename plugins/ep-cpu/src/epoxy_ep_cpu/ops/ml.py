"""ai.onnx.ml ops: LabelEncoder (1, 2, 4), TreeEnsemble (5), ArrayFeatureExtractor (1),
Binarizer (1)."""

from __future__ import annotations

import numpy as np

from epoxy.contract import NodeSpec
from epoxy.kit import Unsupported

from ..registry import KERNELS
from ._forest import LEAF, MEMBER, Forest
from ._ml_common import apply_regression_transform, feature_matrix
from ._util import as_text as _s

ML = "ai.onnx.ml"


# --------------------------------------------------------------------------- Binarizer


@KERNELS.register("Binarizer", 1, domain=ML)
def binarizer(node: NodeSpec):
    threshold = float(node.attr("threshold", 0.0))

    def run(x: np.ndarray) -> np.ndarray:
        return (x > threshold).astype(x.dtype)

    return run


# --------------------------------------------------------------------------- ArrayFeatureExtractor


@KERNELS.register("ArrayFeatureExtractor", 1, domain=ML)
def array_feature_extractor(node: NodeSpec):
    def run(x: np.ndarray, indices: np.ndarray) -> np.ndarray:
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        last = x.shape[-1] if x.ndim else 0
        if idx.size and (idx.min() < -last or idx.max() >= last):
            raise IndexError(f"ArrayFeatureExtractor: index out of range for last dim {last}")
        out = np.take(x, idx, axis=-1)
        if x.ndim == 1:
            out = out.reshape(1, -1)
        return out

    return run


# --------------------------------------------------------------------------- LabelEncoder


class _Lookup:
    """Vectorized key -> value map (sorted keys + searchsorted; last duplicate wins)."""

    def __init__(self, keys: np.ndarray, values: np.ndarray, default: object) -> None:
        if keys.shape[0] != values.shape[0]:
            raise Unsupported("LabelEncoder: keys and values have different lengths")
        self.is_str = keys.dtype.kind in "OUS"
        if self.is_str:
            keys = keys.astype(str)
        self.nan_value = None
        if keys.dtype.kind == "f":
            nan = np.isnan(keys)
            if nan.any():
                self.nan_value = values[np.nonzero(nan)[0][-1]]
            keys, values = keys[~nan], values[~nan]
        # keep the last occurrence of every key
        rev_keys, rev_vals = keys[::-1], values[::-1]
        uniq, first = np.unique(rev_keys, return_index=True)
        self.keys = uniq
        self.values = rev_vals[first]
        self.default = default
        self.out_dtype = values.dtype

    def __call__(self, x: np.ndarray) -> np.ndarray:
        xa = np.asarray(x)
        if self.is_str:
            probe = xa.astype(str)
        elif self.keys.dtype.kind == "f":
            probe = xa.astype(np.float64)
        else:
            probe = xa
        out = np.empty(xa.shape, dtype=self.out_dtype)
        out[...] = self.default
        if self.keys.size and xa.size:
            keys = self.keys.astype(np.float64) if self.keys.dtype.kind == "f" else self.keys
            pos = np.searchsorted(keys, probe)
            pos_c = np.minimum(pos, keys.size - 1)
            hit = keys[pos_c] == probe
            out[hit] = self.values[pos_c[hit]]
        if self.nan_value is not None and probe.dtype.kind == "f":
            out[np.isnan(probe)] = self.nan_value
        return out


def _attr_array(node: NodeSpec, kind: str, prefix: str) -> np.ndarray | None:
    v = node.attr(f"{prefix}_{kind}")
    if v is None:
        return None
    if kind == "strings":
        return np.asarray([_s(s) for s in v], dtype=object)
    if kind == "int64s":
        return np.asarray(v, dtype=np.int64)
    if kind == "floats":
        return np.asarray(v, dtype=np.float32)
    arr = np.asarray(v).reshape(-1)  # tensor
    if arr.dtype.kind in "SU":
        arr = np.asarray([_s(s) for s in arr], dtype=object)
    return arr


def _one(node: NodeSpec, prefix: str, kinds: tuple[str, ...]) -> np.ndarray:
    found = [a for a in (_attr_array(node, k, prefix) for k in kinds) if a is not None]
    if len(found) != 1:
        raise Unsupported(f"LabelEncoder needs exactly one {prefix}_* attribute")
    return found[0]


def _default_for(node: NodeSpec, values: np.ndarray, allow_tensor: bool) -> object:
    if allow_tensor and node.attr("default_tensor") is not None:
        d = np.asarray(node.attr("default_tensor")).reshape(-1)
        v = d[0]
        return _s(v) if isinstance(v, (bytes, np.bytes_)) else v
    if values.dtype == object:
        return _s(node.attr("default_string", "_Unused"))
    if values.dtype.kind in "iu":
        return int(node.attr("default_int64", -1))
    return float(node.attr("default_float", -0.0))


@KERNELS.register("LabelEncoder", 1, domain=ML)
def label_encoder_1(node: NodeSpec):
    classes = np.asarray([_s(s) for s in (node.attr("classes_strings") or ())], dtype=object)
    default_string = node.attr("default_string")
    default_int = node.attr("default_int64")
    to_int = _Lookup(classes, np.arange(classes.size, dtype=np.int64), int(-1 if default_int is None else default_int))
    fallback = _s(default_string) if default_string is not None else "_Unused"

    def run(x: np.ndarray) -> np.ndarray:
        if x.dtype.kind in "iu":
            idx = x.astype(np.int64)
            ok = (idx >= 0) & (idx < classes.size)
            out = np.full(x.shape, fallback, dtype=object)
            out[ok] = classes[idx[ok]]
            return out
        return to_int(x)

    return run


@KERNELS.register("LabelEncoder", (2, 4), domain=ML)
def label_encoder_2(node: NodeSpec):
    tensors = node.opset >= 4
    kinds = ("strings", "int64s", "floats") + (("tensor",) if tensors else ())
    keys = _one(node, "keys", kinds)
    values = _one(node, "values", kinds)
    default = _default_for(node, values, tensors)
    lookup = _Lookup(keys, values, default)

    def run(x: np.ndarray) -> np.ndarray:
        return lookup(x)

    return run


# --------------------------------------------------------------------------- TreeEnsemble


@KERNELS.register("TreeEnsemble", 5, domain=ML)
def tree_ensemble(node: NodeSpec):
    """Compiles into the shared evaluator (``_forest``): nodes first, then leaves, so a
    ``nodes_trueleafs``/``nodes_falseleafs`` flag turns a child id into ``n_nodes + id``."""

    def ints(name: str) -> np.ndarray:
        return np.asarray(node.attr(name) or (), dtype=np.int64)

    def tensor(name: str) -> np.ndarray | None:
        v = node.attr(name)
        return None if v is None else np.asarray(v).reshape(-1)

    feature = ints("nodes_featureids")
    n_nodes = feature.size
    modes_t = tensor("nodes_modes")
    modes = modes_t.astype(np.int64) if modes_t is not None else np.zeros(n_nodes, np.int64)
    splits_t = tensor("nodes_splits")
    splits = splits_t.astype(np.float64) if splits_t is not None else np.zeros(n_nodes)
    true_ids = ints("nodes_truenodeids")
    false_ids = ints("nodes_falsenodeids")
    true_leaf = ints("nodes_trueleafs").astype(bool)
    false_leaf = ints("nodes_falseleafs").astype(bool)
    miss = node.attr("nodes_missing_value_tracks_true")
    missing_true = np.asarray(miss, dtype=bool) if miss else np.zeros(n_nodes, dtype=bool)
    roots = ints("tree_roots")
    leaf_targets = ints("leaf_targetids")
    lw = tensor("leaf_weights")
    leaf_weights = lw.astype(np.float64) if lw is not None else np.zeros(leaf_targets.size)
    n_leaves = leaf_targets.size
    n_targets = int(node.attr("n_targets", 1))
    aggregate = int(node.attr("aggregate_function", 1))
    post = int(node.attr("post_transform", 0))
    if aggregate not in (0, 1, 2, 3):
        raise Unsupported(f"TreeEnsemble aggregate_function {aggregate} is not supported")
    if post not in (0, 1, 2, 3, 4):
        raise Unsupported(f"TreeEnsemble post_transform {post} is not supported")
    for name, arr in (
        ("nodes_modes", modes),
        ("nodes_splits", splits),
        ("nodes_truenodeids", true_ids),
        ("nodes_falsenodeids", false_ids),
        ("nodes_trueleafs", true_leaf),
        ("nodes_falseleafs", false_leaf),
        ("nodes_missing_value_tracks_true", missing_true),
    ):
        if arr.size != n_nodes:
            raise Unsupported(f"TreeEnsemble: {name} has {arr.size} entries for {n_nodes} nodes")
    if leaf_weights.size != n_leaves:
        raise Unsupported("TreeEnsemble: leaf_weights and leaf_targetids have different lengths")
    # set membership: member node -> its value set (sets listed in node order, NaN-delimited)
    member_nodes = np.nonzero(modes == MEMBER)[0]
    membership: dict[int, np.ndarray] = {}
    if member_nodes.size:
        mv = tensor("membership_values")
        if mv is None:
            raise Unsupported("TreeEnsemble: BRANCH_MEMBER nodes need membership_values")
        mv = mv.astype(np.float64)
        groups = [g[~np.isnan(g)] for g in np.split(mv, np.nonzero(np.isnan(mv))[0])][: member_nodes.size]
        if len(groups) < member_nodes.size:
            raise Unsupported("TreeEnsemble: fewer membership sets than BRANCH_MEMBER nodes")
        membership = dict(zip(member_nodes.tolist(), groups))
    forest = Forest(
        op="TreeEnsemble",
        roots=roots,
        feature=np.concatenate([feature, np.zeros(n_leaves, np.int64)]),
        threshold=np.concatenate([splits, np.zeros(n_leaves)]),
        mode=np.concatenate([modes, np.full(n_leaves, LEAF, np.int64)]),
        true_child=np.concatenate([np.where(true_leaf, n_nodes + true_ids, true_ids), np.zeros(n_leaves, np.int64)]),
        false_child=np.concatenate(
            [np.where(false_leaf, n_nodes + false_ids, false_ids), np.zeros(n_leaves, np.int64)]
        ),
        missing_true=np.concatenate([missing_true, np.zeros(n_leaves, bool)]),
        leaf_node=n_nodes + np.arange(n_leaves),
        leaf_target=leaf_targets,
        leaf_weight=leaf_weights,
        n_targets=n_targets,
        membership=membership,
    )

    def run(x: np.ndarray) -> np.ndarray:
        # float32 (and float16) inputs compare in float32, float64 in float64
        xa = feature_matrix(x, "TreeEnsemble", np.float64 if x.dtype == np.float64 else np.float32)
        scores = forest.aggregate(xa, aggregate).values
        return apply_regression_transform(scores, post).astype(x.dtype)

    return run
