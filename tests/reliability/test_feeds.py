"""Feeds: wrong names/dtypes/ranks/dims are refused naming the input; non-contiguous,
read-only and NaN/inf feeds work; no kernel ever writes into a feed (checked over every
ONNX backend node case with non-contiguous inputs, compared byte for byte after the run).
Read-only feeds are copied by the session (run/feeds.py), so the check feeds writable views:
those reach the kernels as given."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import seeds

import epoxy
from epoxy import InvalidFeedError


@pytest.fixture(scope="module")
def mlp():
    return epoxy.InferenceSession(seeds.mlp(), providers=["cpu"])


@pytest.mark.parametrize(("feeds", "message"), [
    ({}, "missing input 'x'"),
    ({"x": np.ones((2, 8), np.float32), "z": np.ones(1)}, "unknown input 'z'"),
    ({"x": np.ones((2, 8), np.float64)}, "input 'x': expected dtype float32, got float64"),
    ({"x": np.ones((2, 8, 1), np.float32)}, "input 'x': expected rank 2"),
    ({"x": np.ones((2, 7), np.float32)}, "input 'x': dim 1 must be 8, got 7"),
    ({"x": [[1.0] * 7]}, "input 'x': dim 1 must be 8, got 7"),  # lists are converted (onnxruntime does)
    ({"x": None}, "input 'x': expected a numpy.ndarray"),
])
def test_bad_feeds_are_refused_naming_the_input(mlp, feeds, message):
    with pytest.raises(InvalidFeedError, match=message.replace("(", r"\(").replace(")", r"\)")) as info:
        mlp.run(None, feeds)
    assert info.value.input_name in ("x", "z")


def test_symbolic_dims_must_agree_across_inputs():
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Add", ["a", "b"], ["y"])], "g",
                              [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["n"]),
                               helper.make_tensor_value_info("b", TensorProto.FLOAT, ["n"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])])
    session = epoxy.InferenceSession(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
                                     providers=["cpu"])
    with pytest.raises(InvalidFeedError, match=r"input 'b': dim 0 \('n'\) is 4 but another input set 'n'=3"):
        session.run(None, {"a": np.ones(3, np.float32), "b": np.ones(4, np.float32)})


def _odd_layouts(x: np.ndarray) -> dict[str, np.ndarray]:
    wide = np.zeros(x.shape[:-1] + (x.shape[-1] * 2,), x.dtype)
    wide[..., ::2] = x
    frozen = x.copy()
    frozen.setflags(write=False)
    layouts = {"strided": wide[..., ::2], "fortran": np.asfortranarray(x),
               "negative-stride": np.ascontiguousarray(x[::-1])[::-1], "read-only": frozen,
               "read-only strided": wide[..., ::2]}
    layouts["read-only strided"].setflags(write=False)
    assert not layouts["strided"].flags.c_contiguous and not layouts["fortran"].flags.c_contiguous
    return layouts


@pytest.mark.parametrize("seed", ["mlp", "conv"])
def test_non_contiguous_and_read_only_feeds_give_the_same_result(seed):
    session = epoxy.InferenceSession(seeds.SEEDS[seed](), providers=["cpu"])
    arg = session.get_inputs()[0]
    shape = [3 if not isinstance(d, int) else d for d in arg.shape]
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    expected = session.run(None, {arg.name: x})[0]
    for label, odd in _odd_layouts(x).items():
        np.testing.assert_array_equal(session.run(None, {arg.name: odd})[0], expected, err_msg=label)


def test_nan_and_inf_feeds_run_and_propagate(mlp):
    x = np.ones((3, 8), np.float32)
    x[0, 0], x[1, 1], x[2, 2] = np.nan, np.inf, -np.inf
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        y = mlp.run(None, {"x": x})[0]
    assert y.shape == (3, 4)
    assert np.isnan(y[0]).all()  # NaN poisons its row through MatMul and Softmax
    assert not np.isnan(y[2]).all() or np.isnan(y[2]).all()  # -inf rows: defined by IEEE, no error


def _strided(value, rng):
    """A copy of ``value`` the kernels receive as it is: arrays of rank >= 1 become
    non-contiguous views (writable, so the session does not copy them)."""
    if isinstance(value, list):
        return [_strided(v, rng) for v in value]
    if not isinstance(value, np.ndarray):
        return value
    if value.ndim >= 1 and value.dtype != object and value.shape[-1] > 1:
        wide = np.zeros(value.shape[:-1] + (value.shape[-1] * 2,), value.dtype)
        wide[..., ::2] = value
        view = wide[..., ::2]
    else:
        view = value.copy()
    return view


def test_no_kernel_writes_into_its_inputs():
    """Every backend node case, fed non-contiguous inputs: results must match and the inputs
    must be byte for byte unchanged (a kernel writing into an input changes the caller's
    array: writable feeds are not copied)."""
    from epoxy_sdk.conformance.backend_suite import assert_outputs_match, is_random, load_cases, load_data

    failures = []
    cases = load_cases("node")
    rng = np.random.default_rng(0)
    for case in cases:
        model = case.load_model()
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                session = epoxy.InferenceSession(model, providers=["cpu"])
                for feeds, expected in load_data(case, model):
                    strided = {k: _strided(v, rng) for k, v in feeds.items()}
                    before = {
                        k: (np.array(v, copy=True) if isinstance(v, np.ndarray) else v) for k, v in strided.items()
                    }
                    actual = session.run(None, strided)
                    assert_outputs_match(expected, actual, case.rtol, case.atol, values=not is_random(model))
                    for k, v in strided.items():
                        if isinstance(v, np.ndarray) and v.dtype != object:
                            assert v.tobytes() == before[k].tobytes(), f"input {k} was modified"
        except Exception as exc:  # noqa: BLE001 - collected and reported together
            failures.append(f"{case.name}: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
    assert len(cases) > 1500
    assert not failures, f"{len(failures)} cases fail with strided inputs:\n" + "\n".join(failures[:20])


def test_arbitrary_feeds_work_or_raise_invalid_feed(mlp):
    """Property: whatever is fed as ``x`` (any dtype, rank, dims, or not an array at all),
    ``run`` returns a [batch, 4] result or raises InvalidFeedError, nothing else."""
    from hypothesis import given, settings
    from hypothesis import strategies as st
    from hypothesis.extra import numpy as hnp

    dtypes = st.sampled_from([np.float32, np.float64, np.float16, np.int64, np.int32, np.uint8, np.bool_,
                              np.complex64, np.object_])
    arrays = hnp.arrays(dtypes, hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=9),
                        elements=None, fill=st.nothing()).filter(lambda a: a.dtype != object) | \
        hnp.arrays(np.float32, st.tuples(st.integers(0, 5), st.just(8)))
    others = st.one_of(st.none(), st.integers(), st.text(max_size=3), st.lists(st.floats(), max_size=8),
                       st.builds(lambda: np.float32(1.0)))

    @settings(max_examples=300, deadline=None, database=None)
    @given(st.one_of(arrays, others), st.booleans())
    def check(value, frozen):
        if frozen and isinstance(value, np.ndarray):
            value.setflags(write=False)
        try:
            with np.errstate(all="ignore"):
                (y,) = mlp.run(None, {"x": value})
        except InvalidFeedError as exc:
            assert exc.input_name == "x"
        else:
            assert isinstance(value, np.ndarray) and y.shape == (value.shape[0], 4)

    check()
