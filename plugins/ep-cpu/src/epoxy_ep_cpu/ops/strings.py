"""String ops: StringConcat (20), StringNormalizer (10), StringSplit (20),
RegexFullMatch (20), and the text featurizer TfIdfVectorizer (9).

Strings are object arrays of ``str``; per-string work goes through numpy object ufuncs
(``np.frompyfunc``), which is as vectorized as Python strings allow.
"""

from __future__ import annotations

import re

import numpy as np

from epoxy.contract import NodeSpec
from epoxy.kit import Unsupported

from ..registry import KERNELS
from ._attr_checks import invalid
from ._flags import flag
from ._util import as_text as _s
from ._util import output_guard


def _as_str_array(x: np.ndarray) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype == object:
        return a
    return a.astype(str).astype(object)


# --------------------------------------------------------------------------- StringConcat


@KERNELS.register("StringConcat", 20)
def string_concat(node: NodeSpec):
    def run(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        out = np.add(_as_str_array(x), _as_str_array(y), dtype=object)
        return np.asarray(out, dtype=object)

    return run


# --------------------------------------------------------------------------- StringNormalizer

_lower = np.frompyfunc(str.lower, 1, 1)
_upper = np.frompyfunc(str.upper, 1, 1)


@KERNELS.register("StringNormalizer", 10)
def string_normalizer(node: NodeSpec):
    action = _s(node.attr("case_change_action", "NONE")).upper()
    if action not in ("NONE", "LOWER", "UPPER"):
        raise Unsupported(f"StringNormalizer case_change_action {action!r} is not supported")
    case_sensitive = flag(node, "is_case_sensitive", 0)
    stopwords = [_s(w) for w in (node.attr("stopwords") or ())]
    # `locale` only selects the casing rules; Python's Unicode default casing
    # (str.lower / str.upper) is used for every locale.
    if case_sensitive:
        stop = np.asarray(stopwords, dtype=object)
    else:
        stop = np.asarray([w.lower() for w in stopwords], dtype=object)

    def run(x: np.ndarray) -> np.ndarray:
        xs = _as_str_array(x)
        if xs.ndim == 2 and xs.shape[0] != 1:
            raise ValueError(f"StringNormalizer accepts [C] or [1, C] input, got {xs.shape}")
        if xs.ndim not in (1, 2):
            raise ValueError(f"StringNormalizer accepts [C] or [1, C] input, got {xs.shape}")
        flat = xs.reshape(-1)
        if stop.size and flat.size:
            probe = flat if case_sensitive else _lower(flat)
            keep = ~np.isin(probe.astype(str), stop.astype(str))
            flat = flat[keep]
        if flat.size and action == "LOWER":
            flat = _lower(flat)
        elif flat.size and action == "UPPER":
            flat = _upper(flat)
        flat = np.asarray(flat, dtype=object)
        if flat.size == 0:
            flat = np.asarray([""], dtype=object)
        if xs.ndim == 2:
            return flat.reshape(1, -1)
        return flat

    return run


# --------------------------------------------------------------------------- StringSplit


@KERNELS.register("StringSplit", 20)
def string_split(node: NodeSpec):
    delimiter = node.attr("delimiter")
    delimiter = _s(delimiter) if delimiter is not None else ""
    sep = delimiter if delimiter != "" else None
    maxsplit = node.attr("maxsplit")
    maxsplit = -1 if maxsplit is None else int(maxsplit)
    if maxsplit < 0:
        maxsplit = -1
    splitter = np.frompyfunc(lambda s: s.split(sep, maxsplit), 1, 1)

    def run(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        xs = _as_str_array(x)
        if xs.size == 0:
            return np.zeros((*xs.shape, 0), dtype=object), np.zeros(xs.shape, dtype=np.int64)
        parts = splitter(xs.reshape(-1))
        counts = np.fromiter((len(p) for p in parts), dtype=np.int64, count=parts.size)
        width = int(counts.max()) if counts.size else 0
        out = np.full((parts.size, width), "", dtype=object)
        rows = np.repeat(np.arange(parts.size), counts)
        cols = np.arange(rows.size) - np.repeat(np.cumsum(counts) - counts, counts)
        flat_parts = [s for p in parts for s in p]
        if flat_parts:
            out[rows, cols] = np.asarray(flat_parts, dtype=object)
        return out.reshape(*xs.shape, width), counts.reshape(xs.shape)

    return run


# --------------------------------------------------------------------------- RegexFullMatch


@KERNELS.register("RegexFullMatch", 20)
def regex_full_match(node: NodeSpec):
    pattern = node.attr("pattern")
    if pattern is None:
        raise Unsupported("RegexFullMatch needs the pattern attribute")
    try:
        rx = re.compile(_s(pattern))
    except re.error as exc:
        raise Unsupported(f"RegexFullMatch pattern {pattern!r} is not valid: {exc}") from exc
    matcher = np.frompyfunc(lambda s: rx.fullmatch(s) is not None, 1, 1)

    def run(x: np.ndarray) -> np.ndarray:
        xs = _as_str_array(x)
        if xs.size == 0:
            return np.zeros(xs.shape, dtype=bool)
        return np.asarray(matcher(xs), dtype=bool).reshape(xs.shape)

    return run


# --------------------------------------------------------------------------- TfIdfVectorizer


@KERNELS.register("TfIdfVectorizer", 9)
def tfidf_vectorizer(node: NodeSpec):
    mode = _s(node.attr("mode", "TF")).upper()
    if mode not in ("TF", "IDF", "TFIDF"):
        raise Unsupported(f"TfIdfVectorizer mode {mode!r} is not supported")
    min_n = int(node.attr("min_gram_length", 1))
    max_n = int(node.attr("max_gram_length", 1))
    max_skip = int(node.attr("max_skip_count", 0))
    counts_attr = [int(c) for c in (node.attr("ngram_counts") or ())]
    indexes = np.asarray(node.attr("ngram_indexes") or (), dtype=np.int64)
    weights_attr = node.attr("weights")
    pool_s = node.attr("pool_strings")
    pool_i = node.attr("pool_int64s")
    if (pool_s is None) == (pool_i is None):
        raise Unsupported("TfIdfVectorizer needs exactly one of pool_strings and pool_int64s")
    is_str = pool_s is not None
    pool = (
        np.asarray([_s(v) for v in pool_s], dtype=str)
        if is_str
        else np.asarray(pool_i, dtype=np.int64)
    )
    if indexes.size and int(indexes.min()) < 0:
        raise invalid(node, f"attribute 'ngram_indexes' holds {int(indexes.min())}; indexes must be >= 0")
    out_len = int(indexes.max()) + 1 if indexes.size else 0
    guard = output_guard(node)  # out_len comes from an attribute: checked per batch before allocating
    weights = (
        np.asarray(weights_attr, dtype=np.float32)
        if weights_attr is not None and len(weights_attr)
        else np.ones(indexes.size, dtype=np.float32)
    )

    vocab = np.unique(pool)
    v = max(int(vocab.size), 1)

    def token_ids(tokens: np.ndarray) -> np.ndarray:
        if vocab.size == 0:
            return np.full(tokens.shape, -1, dtype=np.int64)
        pos = np.searchsorted(vocab, tokens)
        pos_c = np.minimum(pos, vocab.size - 1)
        return np.where(vocab[pos_c] == tokens, pos_c, -1).astype(np.int64)

    # pool n-grams by length: ids, and their global n-gram number (index into ngram_indexes)
    by_len: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    gram_no = 0
    for i, start in enumerate(counts_attr):
        n = i + 1
        end = counts_attr[i + 1] if i + 1 < len(counts_attr) else pool.size
        grams = pool[start:end]
        if grams.size % n:
            raise Unsupported(f"TfIdfVectorizer pool of {n}-grams has {grams.size} entries")
        k = grams.size // n
        if v ** n >= 2**62:
            raise Unsupported(f"TfIdfVectorizer: {n}-gram key space too large")
        ids = token_ids(grams).reshape(k, n)
        keys = np.zeros(k, dtype=np.int64)
        for j in range(n):
            keys = keys * v + ids[:, j]
        order = np.argsort(keys, kind="stable")
        by_len[n] = (keys[order], gram_no + order)
        gram_no += k
    if gram_no != indexes.size:
        raise Unsupported("TfIdfVectorizer: ngram_indexes does not match the pool")

    def run(x: np.ndarray) -> np.ndarray:
        xa = np.asarray(x)
        one_d = xa.ndim == 1
        rows = xa.reshape(1, -1) if one_d else xa.reshape(xa.shape[0], -1)
        tokens = rows.astype(str) if is_str else rows.astype(np.int64)
        ids = token_ids(tokens)
        b, c = ids.shape
        guard((b, out_len), np.dtype(np.float64))
        out = np.zeros((b, out_len), dtype=np.float64)
        # only the pool's lengths, and only skips whose n-gram fits in a row, can match:
        # huge max_gram_length / max_skip_count values cost nothing
        for n in sorted(k for k in by_len if max(min_n, 1) <= k <= max_n):
            keys_pool, gram_idx = by_len[n]
            fitting = (c - 1) // (n - 1) if n > 1 else 1  # skip + 1 < this for a span inside c
            skips = range(max(0, min(max_skip + 1, fitting))) if n > 1 else range(1)
            for skip in skips:
                step = skip + 1
                span = (n - 1) * step
                if c - span <= 0:
                    continue
                starts = np.arange(c - span)
                keys = np.zeros((b, starts.size), dtype=np.int64)
                bad = np.zeros((b, starts.size), dtype=bool)
                for j in range(n):
                    col = ids[:, starts + j * step]
                    bad |= col < 0
                    keys = keys * v + np.maximum(col, 0)
                pos = np.searchsorted(keys_pool, keys)
                pos_c = np.minimum(pos, keys_pool.size - 1)
                hit = (~bad) & (keys_pool[pos_c] == keys)
                r_idx = np.broadcast_to(np.arange(b)[:, None], keys.shape)[hit]
                cols = indexes[gram_idx[pos_c[hit]]]
                np.add.at(out, (r_idx, cols), 1.0)
        if mode == "IDF":
            out = np.minimum(out, 1.0)
        if mode != "TF":
            w = np.zeros(out_len, dtype=np.float64)
            w[indexes] = weights.astype(np.float64)
            out = out * w
        out = out.astype(np.float32)
        return out.reshape(-1) if one_d else out

    return run
