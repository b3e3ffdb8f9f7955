"""The one vectorized tree-ensemble evaluator behind TreeEnsemble (ml opset 5) and the
legacy TreeEnsembleClassifier / TreeEnsembleRegressor (ml opsets 1 and 3).

Every node of every tree lives in one flat table. A leaf loops back to itself, so all
(row, tree) pairs of a block of rows step down one level together, ``depth`` times, with
a handful of ``np.take`` gathers per level and no masking: the feature value at the
current node, its threshold, one comparison, then the child. When every branch node uses
the same comparison (the usual case) the child table has two columns (false, true);
otherwise, or when NaN inputs must be routed by ``missing_value_tracks_true``, a 4-column
table is indexed by ``2*(x <= t) + (x < t) + isnan(x)`` (0: x > t, 1: NaN, 2: x == t,
3: x < t) and each node's mode picks its child per column at build time.

NaN follows onnxruntime: a node goes to its true child when the comparison holds (so
``BRANCH_NEQ`` sends NaN to true) or when the value is NaN and the node's
``missing_value_tracks_true`` is set.

The leaves' weights are ``slots``: slot ``j`` holds the ``j``-th (target, weight) pair of
each leaf. Aggregation sums (or takes the min/max of) the gathered slot weights per target;
when a slot's target is the same for all leaves of a tree, as in every converter's output,
the per-target sums are a matrix product with a (tree x target) 0/1 matrix.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from epoxy.kit import Unsupported

LEQ, LT, GTE, GT, EQ, NEQ, MEMBER = range(7)
LEAF = -1
MODE_NAMES = {"BRANCH_LEQ": LEQ, "BRANCH_LT": LT, "BRANCH_GTE": GTE, "BRANCH_GT": GT,
              "BRANCH_EQ": EQ, "BRANCH_NEQ": NEQ, "LEAF": LEAF}

#: aggregate functions, numbered as TreeEnsemble (opset 5) numbers them
AVERAGE, SUM, MIN, MAX = range(4)

#: (row, tree) pairs stepped together: large enough to amortize numpy's per-call cost,
#: small enough for the working arrays to stay in cache
_BLOCK = 1 << 18

# per mode: is the condition true in the columns (x > t, NaN, x == t, x < t)?
_TRUTH = {
    LEQ: (False, False, True, True),
    LT: (False, False, False, True),
    GTE: (True, False, True, False),
    GT: (True, False, False, False),
    EQ: (False, False, True, False),
    NEQ: (True, True, False, True),
    MEMBER: (False, False, False, True),
}
_COMPARE = {LEQ: np.less_equal, LT: np.less, GTE: np.greater_equal, GT: np.greater,
            EQ: np.equal, NEQ: np.not_equal}


@dataclass(frozen=True)
class Scores:
    """Aggregated leaf weights of a batch: ``values[n, k]`` and whether any reached leaf
    carried a weight for target ``k`` (``has``)."""

    values: np.ndarray
    has: np.ndarray


class Forest:
    """A compiled ensemble: node tables, roots, leaf weight slots.

    Nodes are numbered ``0..N-1`` across all trees; ``mode[i]`` is one of the comparison
    codes or ``LEAF``. ``leaf_node/leaf_target/leaf_weight`` list the weights (several per
    leaf allowed). ``membership`` maps BRANCH_MEMBER nodes to their value sets.

    ``every_leaf_scores`` is onnxruntime's single-target reading: every reached leaf
    counts with its first weight, 0 when it has none (which matters for MIN and MAX).
    """

    def __init__(
        self,
        *,
        op: str,
        roots: np.ndarray,
        feature: np.ndarray,
        threshold: np.ndarray,
        mode: np.ndarray,
        true_child: np.ndarray,
        false_child: np.ndarray,
        missing_true: np.ndarray,
        leaf_node: np.ndarray,
        leaf_target: np.ndarray,
        leaf_weight: np.ndarray,
        n_targets: int,
        membership: dict[int, np.ndarray] | None = None,
        every_leaf_scores: bool = False,
    ) -> None:
        self.op = op
        n = int(feature.size)
        mode = np.asarray(mode, dtype=np.int64)
        leaf = mode == LEAF
        branch = ~leaf
        roots = np.asarray(roots, dtype=np.int64)
        for name, ids in (("true", true_child[branch]), ("false", false_child[branch]), ("root", roots)):
            if ids.size and (ids.min() < 0 or ids.max() >= n):
                raise Unsupported(f"{op}: a {name} node id points outside the ensemble's {n} nodes")
        if np.any(feature[branch] < 0):
            raise Unsupported(f"{op}: negative feature id")
        self.n_nodes = n
        self.n_trees = int(roots.size)
        self.n_targets = int(n_targets)
        self.n_features = int(feature[branch].max()) + 1 if branch.any() else 0
        idx = np.arange(n, dtype=np.int64)
        tc = np.where(leaf, idx, true_child)
        fc = np.where(leaf, idx, false_child)
        self.depth, tree_of = self._depth_and_trees(roots, tc, fc, leaf)

        self.index_dtype = np.int32 if 4 * n < 2**31 else np.int64
        it = self.index_dtype
        self.roots = roots.astype(it)
        self.feature = np.where(leaf, 0, feature).astype(it)
        self.threshold = np.where(leaf, 0.0, threshold).astype(np.float64)
        self._threshold32 = self.threshold.astype(np.float32)
        missing = np.asarray(missing_true, dtype=bool) & branch
        modes = set(np.unique(mode[branch]).tolist())
        if not modes <= set(_TRUTH):
            raise Unsupported(f"{op}: unknown node mode(s) {sorted(modes - set(_TRUTH))}")
        # fast path: one comparison for every branch node
        self.single = modes.pop() if len(modes) == 1 and MEMBER not in modes else None
        if not branch.any():
            self.single = LEQ
        self.child2 = np.stack([fc, tc], axis=1).reshape(-1).astype(it)
        # NaN needs the 4-column table unless NaN's comparison result already says where to go
        self.nan_matters = bool(missing.any()) and self.single != NEQ
        truth = np.zeros((n, 4), dtype=bool)
        for m, cols in _TRUTH.items():
            sel = mode == m
            truth[sel] = cols
        truth[:, 1] |= missing
        self.child4 = np.where(truth, tc[:, None], fc[:, None]).reshape(-1).astype(it)
        membership = membership or {}
        self.member_nodes = np.asarray(sorted(membership), dtype=np.int64)
        self.member_sets = [np.asarray(membership[m], dtype=np.float64) for m in self.member_nodes.tolist()]
        self.member_index = np.full(n, -1, dtype=it)
        self.member_index[self.member_nodes] = np.arange(self.member_nodes.size)
        self._slots(np.asarray(leaf_node, np.int64), np.asarray(leaf_target, np.int64),
                    np.asarray(leaf_weight, np.float64), tree_of, leaf)
        if every_leaf_scores and self.n_targets == 1:
            if not self.slot_weight:
                self.slot_weight.append(np.zeros(n))
                self.slot_target.append(np.zeros(n, dtype=it))
                self.slot_tree_matrix.append(np.ones((self.n_trees, 1)))
            del self.slot_weight[1:], self.slot_target[1:], self.slot_tree_matrix[1:]
            self.slot_has = [np.ones(n, dtype=bool)]
            self.slot_always = [True]
            self.slot_target[0][:] = 0
            self.slot_tree_matrix[0] = np.ones((self.n_trees, 1))

    # ------------------------------------------------------------------ build helpers

    def _depth_and_trees(self, roots: np.ndarray, tc: np.ndarray, fc: np.ndarray,
                         leaf: np.ndarray) -> tuple[int, np.ndarray]:
        """Longest root-to-leaf path (in branch nodes) and the tree of every node."""
        tree_of = np.full(self.n_nodes, -1, dtype=np.int64)
        frontier = roots
        trees = np.arange(roots.size, dtype=np.int64)
        depth = 0
        while frontier.size:
            tree_of[frontier] = trees
            open_ = ~leaf[frontier]
            if not open_.any():
                break
            depth += 1
            if depth > self.n_nodes:
                raise Unsupported(f"{self.op}: a tree has a cycle")
            fr, tr = frontier[open_], trees[open_]
            t = max(int(roots.size), 1)
            pairs = np.unique(np.concatenate([tc[fr] * t + tr, fc[fr] * t + tr]))
            frontier, trees = pairs // t, pairs % t
        return depth, tree_of

    def _slots(self, node: np.ndarray, target: np.ndarray, weight: np.ndarray,
               tree_of: np.ndarray, leaf: np.ndarray) -> None:
        n, k = self.n_nodes, self.n_targets
        if node.size and (node.min() < 0 or node.max() >= n):
            raise Unsupported(f"{self.op}: a leaf weight names a node outside the ensemble")
        if target.size and (target.min() < 0 or target.max() >= k):
            raise Unsupported(f"{self.op}: a leaf weight's target/class id is outside 0..{k - 1}")
        order = np.argsort(node, kind="stable")
        node, target, weight = node[order], target[order], weight[order]
        rank = np.arange(node.size) - np.searchsorted(node, node, side="left")
        n_slots = int(rank.max()) + 1 if rank.size else 0
        self.slot_target: list[np.ndarray] = []  # target per node (0 where none)
        self.slot_has: list[np.ndarray] = []  # whether the node has a j-th weight
        self.slot_weight: list[np.ndarray] = []  # weight per node (0 where none)
        self.slot_tree_matrix: list[np.ndarray | None] = []
        self.slot_always: list[bool] = []  # every reachable leaf has a j-th weight
        reached = leaf & (tree_of >= 0)
        for j in range(n_slots):
            sel = rank == j
            tgt = np.full(n, -1, dtype=np.int64)
            w = np.zeros(n, dtype=np.float64)
            tgt[node[sel]] = target[sel]
            w[node[sel]] = weight[sel]
            has = tgt >= 0
            self.slot_has.append(has)
            self.slot_weight.append(w)
            self.slot_target.append(np.where(has, tgt, 0).astype(self.index_dtype))
            self.slot_always.append(bool(np.all(has[reached])))
            # the slot's target per tree, when it is the same on all the tree's leaves
            trees, tt = tree_of[reached & has], tgt[reached & has]
            matrix = None
            per_tree = np.full(self.n_trees, -1, dtype=np.int64)
            per_tree[trees] = tt
            if np.all(per_tree[trees] == tt):
                matrix = np.zeros((self.n_trees, k), dtype=np.float64)
                hit = np.nonzero(per_tree >= 0)[0]
                matrix[hit, per_tree[hit]] = 1.0
            self.slot_tree_matrix.append(matrix)

    # ------------------------------------------------------------------ evaluation

    def leaves(self, x: np.ndarray) -> np.ndarray:
        """The leaf reached in every tree by every row: ``[N, n_trees]`` node ids.

        ``x`` is ``[N, F]`` float32 or float64; comparisons run in that precision."""
        out = np.empty((x.shape[0], self.n_trees), dtype=self.index_dtype)
        for start, stop, leaves in self._blocks(x):
            out[start:stop] = leaves
        return out

    def _blocks(self, x: np.ndarray):
        """Yields ``(start, stop, leaves)`` over blocks of rows."""
        n = x.shape[0]
        if n == 0 or self.n_trees == 0:
            return
        if self.depth and x.shape[1] < self.n_features:
            raise ValueError(f"{self.op}: input has {x.shape[1]} features, the trees use feature {self.n_features - 1}")
        threshold = self._threshold32 if x.dtype == np.float32 else self.threshold
        has_nan = self.nan_matters and bool(np.isnan(x).any())
        general = self.single is None or has_nan
        memb = self._membership(x) if self.member_nodes.size else None
        rows = max(1, _BLOCK // max(self.n_trees, 1))
        for start in range(0, n, rows):
            stop = min(n, start + rows)
            yield start, stop, self._block(x[start:stop], threshold, general,
                                           None if memb is None else memb[start:stop])

    def _membership(self, x: np.ndarray) -> np.ndarray:
        feats = self.feature[self.member_nodes]
        cols = [np.isin(x[:, f], s) for f, s in zip(feats.tolist(), self.member_sets)]
        return np.stack(cols, axis=1)

    def _block(self, x: np.ndarray, threshold: np.ndarray, general: bool, memb: np.ndarray | None) -> np.ndarray:
        it = self.index_dtype
        r, t = x.shape[0], self.n_trees
        node = np.empty((r, t), dtype=it)
        node[...] = self.roots
        if self.depth == 0:
            return node
        xf = np.ascontiguousarray(x).reshape(-1)
        rowoff = (np.arange(r, dtype=it) * it(x.shape[1]))[:, None]
        buf = np.empty((r, t), dtype=it)
        vals = np.empty((r, t), dtype=x.dtype)
        thr = np.empty((r, t), dtype=x.dtype)
        cond = np.empty((r, t), dtype=bool)
        if not general:
            compare = _COMPARE[self.single]  # type: ignore[index]
            child = self.child2
        else:
            child = self.child4
            lt = np.empty((r, t), dtype=bool)
            code = np.empty((r, t), dtype=it)
        for _ in range(self.depth):
            np.take(self.feature, node, out=buf, mode="clip")
            buf += rowoff
            np.take(xf, buf, out=vals, mode="clip")
            np.take(threshold, node, out=thr, mode="clip")
            if not general:
                compare(vals, thr, out=cond)
                node <<= 1
                node += cond
            else:
                np.less_equal(vals, thr, out=cond)
                np.less(vals, thr, out=lt)
                np.multiply(cond, 2, out=code, dtype=it, casting="unsafe")
                code += lt
                code += np.isnan(vals)
                if memb is not None:
                    m = np.take(self.member_index, node)
                    sel = m >= 0
                    if sel.any():
                        hit = memb[np.nonzero(sel)[0], m[sel]]
                        code[sel] = np.where(hit, 3, np.where(np.isnan(vals[sel]), 1, 0))
                node <<= 2
                node += code
            np.take(child, node, out=buf, mode="clip")
            node, buf = buf, node
        return node

    def aggregate(self, x: np.ndarray, how: int) -> Scores:
        """Per-row, per-target SUM / AVERAGE / MIN / MAX of the reached leaves' weights.

        Targets no reached leaf weighs are 0 in ``values`` and False in ``has``."""
        n, k = x.shape[0], self.n_targets
        values = np.zeros((n, k), dtype=np.float64)
        counts = np.zeros((n, k), dtype=np.float64)
        if how in (MIN, MAX):
            values[...] = np.inf if how == MIN else -np.inf
        for start, stop, leaves in self._blocks(x):
            self._accumulate(leaves, how, values[start:stop], counts[start:stop])
        has = counts > 0
        if how == AVERAGE and self.n_trees:
            values /= self.n_trees
        values[~has] = 0.0
        return Scores(values, has)

    def _accumulate(self, leaves: np.ndarray, how: int, values: np.ndarray, counts: np.ndarray) -> None:
        r, k = values.shape
        for j, weights in enumerate(self.slot_weight):
            w = np.take(weights, leaves)
            matrix = self.slot_tree_matrix[j]
            if how in (SUM, AVERAGE) and matrix is not None:
                values += w @ matrix
                if self.slot_always[j]:
                    counts += matrix.sum(axis=0)
                else:
                    counts += np.take(self.slot_has[j], leaves) @ matrix
                continue
            valid = np.take(self.slot_has[j], leaves)
            tgt = np.take(self.slot_target[j], leaves).astype(np.int64)
            flat = (np.arange(r, dtype=np.int64)[:, None] * k + tgt)[valid]
            counts += np.bincount(flat, minlength=r * k).reshape(r, k)
            if how in (SUM, AVERAGE):
                values += np.bincount(flat, weights=w[valid], minlength=r * k).reshape(r, k)
            else:
                ufunc = np.minimum if how == MIN else np.maximum
                ufunc.at(values.reshape(-1), flat, w[valid])
