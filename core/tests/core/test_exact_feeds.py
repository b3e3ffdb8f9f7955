"""The fast feed check accepts exactly what the full check would pass unchanged."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from epoxy.contract import ValueType
from epoxy.errors import InvalidFeedError
from epoxy.run.feeds import ExactFeeds, check_feeds

F32 = np.dtype(np.float32)
DECLARED = {
    "x": ValueType("tensor", 1, F32, ("n", 3)),
    "y": ValueType("tensor", 1, F32, ("n", None)),
    "k": ValueType("tensor", 7, np.dtype(np.int64), ()),
}
REQUIRED = {"x", "y", "k"}


def _feeds(**changes: Any) -> dict[str, Any]:
    feeds: dict[str, Any] = {"x": np.zeros((2, 3), F32), "y": np.zeros((2, 5), F32), "k": np.array(4, np.int64)}
    feeds.update(changes)
    return {k: v for k, v in feeds.items() if v is not None}


def test_exact_arrays_pass_unchanged_and_the_full_check_agrees() -> None:
    feeds = _feeds()
    assert ExactFeeds(DECLARED, REQUIRED).check(feeds) is feeds
    checked = check_feeds(feeds, DECLARED, REQUIRED)
    assert all(checked[n] is feeds[n] for n in feeds)


@pytest.mark.parametrize("changes", [
    {"x": np.zeros((2, 3), np.float64)},          # wrong dtype
    {"x": np.zeros((2, 4), F32)},                 # static dim
    {"y": np.zeros((3, 5), F32)},                 # symbol n bound to 2 by x
    {"x": np.zeros((2, 3, 1), F32)},              # rank
    {"k": None},                                  # missing
    {"z": np.zeros(1, F32)},                      # unknown name
], ids=["dtype", "static-dim", "symbol", "rank", "missing", "unknown"])
def test_what_the_full_check_refuses_is_left_to_it(changes: dict[str, Any]) -> None:
    feeds = _feeds(**changes)
    assert ExactFeeds(DECLARED, REQUIRED).check(feeds) is None
    with pytest.raises(InvalidFeedError):
        check_feeds(feeds, DECLARED, REQUIRED)


@pytest.mark.parametrize("changes", [
    {"x": [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]},    # a list: converted by the full check
    {"k": np.int64(4)},                           # a numpy scalar
    {"x": np.zeros((2, 3), F32).view(np.ma.MaskedArray)},  # an ndarray subclass
], ids=["list", "scalar", "subclass"])
def test_what_the_full_check_converts_is_left_to_it(changes: dict[str, Any]) -> None:
    feeds = _feeds(**changes)
    assert ExactFeeds(DECLARED, REQUIRED).check(feeds) is None
    check_feeds(feeds, DECLARED, REQUIRED)


def test_inputs_of_unknown_dtype_or_rank_always_take_the_full_check() -> None:
    declared = {"a": ValueType("tensor", 0, None, (2,)), "b": ValueType("tensor", 1, F32, None)}
    fast = ExactFeeds(declared, {"a", "b"})
    assert fast.check({"a": np.zeros(2, F32), "b": np.zeros(1, F32)}) is None


def test_a_read_only_feed_is_copied_once_by_the_full_check() -> None:
    """Read-only buffers (np.frombuffer over a request, Arrow blocks) reach kernels writable: numba
    would otherwise compile a read-only variant of each kernel they meet."""
    body = np.arange(6, dtype=F32).tobytes()
    x = np.frombuffer(body, F32).reshape(2, 3)
    assert not x.flags.writeable
    feeds = _feeds(x=x)
    assert ExactFeeds(DECLARED, REQUIRED).check(feeds) is None
    checked = check_feeds(feeds, DECLARED, REQUIRED)
    assert checked["x"].flags.writeable and checked["x"] is not x
    np.testing.assert_array_equal(checked["x"], x)
    assert checked["y"] is feeds["y"]  # writable feeds are not copied
