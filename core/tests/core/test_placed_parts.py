"""Parts written in place (``epoxy.plan.placed_parts``): which producers get a view of their
consumer's buffer, nested groups, and the values that must never be parts."""

from __future__ import annotations

import numpy as np
from fakes import Factory
from onnx import TensorProto, helper

from epoxy import InferenceSession
from epoxy.contract import OUT_PARTS
from epoxy.kit import KernelProvider, KernelRegistry
from epoxy.plan.arena import ArenaLayout, ArenaPool
from epoxy.plan.placed_parts import place_parts

KERNELS = KernelRegistry()
#: per Concat call: (its out buffer's address or None, each input's address)
CONCATS: list[tuple[int | None, list[int]]] = []


def _neg(node):
    def run(x, out=None):
        return np.negative(x, out=out) if out is not None else np.negative(x)

    run.supports_out = True
    return run


def _concat(node):
    """A channel concatenation of one image that copies only the inputs not at their place."""

    def run(*xs, out=None):
        CONCATS.append((None if out is None else out.ctypes.data, [x.ctypes.data for x in xs]))
        if out is None or out.shape[0] != 1:
            return np.concatenate(xs, axis=1, out=out)
        flat, at = out.reshape(-1), 0
        for x in xs:
            if x.ctypes.data != out.ctypes.data + at * x.itemsize:
                flat[at:at + x.size] = x.reshape(-1)
            at += x.size
        return out

    def parts(out_shape, shapes):
        if out_shape[0] != 1:
            return None
        offsets, at = [], 0
        for shape in shapes:
            offsets.append(at)
            at += int(np.prod(shape))
        return offsets

    run.supports_out = True
    setattr(run, OUT_PARTS, parts)
    return run


KERNELS.register("Neg", (6, 13))(_neg)
KERNELS.register("Concat", (4, 11, 13))(_concat)
KERNELS.register("Identity", (1, 13, 14, 16))(lambda node: lambda x: x)


def _session(make_registry, model):
    registry = make_registry(Factory("parts", lambda d, o: KernelProvider("parts", d, KERNELS, o), 10))
    return InferenceSession(model.SerializeToString(), providers=["parts"], registry=registry)


def _value(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _model(nodes, inputs, outputs, values=()):
    graph = helper.make_graph(nodes, "parts", inputs, outputs, value_info=list(values))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _fire(batch=1, width=16):
    """x -> Neg a, Neg b -> Concat c -> Neg y: a and b are c's parts."""
    nodes = [helper.make_node("Neg", ["x"], ["a"], name="a"), helper.make_node("Neg", ["x"], ["b"], name="b"),
             helper.make_node("Concat", ["a", "b"], ["c"], name="c", axis=1),
             helper.make_node("Neg", ["c"], ["y"], name="y")]
    return _model(nodes, [_value("x", [batch, 4, width])], [_value("y", [batch, 8, width])],
                  [_value("a", [batch, 4, width]), _value("b", [batch, 4, width]), _value("c", [batch, 8, width])])


def _parts_by_name(session):
    layout = session._plan.arena
    names = session._plan.slot_names
    return {names[slot]: at for slot, at in layout.offsets.items()} if layout is not None else {}


def test_producers_write_their_parts_and_the_concat_copies_nothing(make_registry):
    session = _session(make_registry, _fire())
    assert _parts_by_name(session) == {"a": 0, "b": 4 * 16 * 4}
    x = np.random.default_rng(0).standard_normal((1, 4, 16)).astype(np.float32)
    for _ in range(3):
        CONCATS.clear()
        (y,) = session.run(None, {"x": x})
        np.testing.assert_array_equal(y, np.concatenate([x, x], axis=1))
        out, inputs = CONCATS[-1]
        assert out is not None and inputs == [out, out + 4 * 16 * 4]  # both already in place


def test_a_batch_of_two_is_not_contiguous_parts(make_registry):
    session = _session(make_registry, _fire(batch=2))
    assert _parts_by_name(session) == {}
    x = np.random.default_rng(1).standard_normal((2, 4, 16)).astype(np.float32)
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], np.concatenate([x, x], axis=1))


def test_parts_off_a_cache_line_are_left_to_the_copy(make_registry):
    """4 x 3 floats (48 bytes) puts b off a 64-byte line: only a is placed."""
    session = _session(make_registry, _fire(width=3))
    assert _parts_by_name(session) == {"a": 0}
    x = np.random.default_rng(2).standard_normal((1, 4, 3)).astype(np.float32)
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], np.concatenate([x, x], axis=1))


def test_graph_outputs_and_their_aliases_are_never_parts(make_registry):
    """a is a graph output and b is viewed by one (Identity): neither may live in c's buffer."""
    nodes = [helper.make_node("Neg", ["x"], ["a"], name="a"), helper.make_node("Neg", ["x"], ["b"], name="b"),
             helper.make_node("Identity", ["b"], ["b_out"], name="alias"),
             helper.make_node("Concat", ["a", "b"], ["c"], name="c", axis=1),
             helper.make_node("Neg", ["c"], ["y"], name="y")]
    model = _model(nodes, [_value("x", [1, 4, 16])], [_value("y", [1, 8, 16]), _value("a", [1, 4, 16]),
                                                     _value("b_out", [1, 4, 16])],
                   [_value("b", [1, 4, 16]), _value("c", [1, 8, 16])])
    session = _session(make_registry, model)
    assert _parts_by_name(session) == {}
    x = np.random.default_rng(3).standard_normal((1, 4, 16)).astype(np.float32)
    y, a, b = session.run(None, {"x": x})
    np.testing.assert_array_equal(y, np.concatenate([x, x], axis=1))
    np.testing.assert_array_equal(a, -x)
    np.testing.assert_array_equal(b, -x)


def test_a_value_used_twice_is_placed_once(make_registry):
    nodes = [helper.make_node("Neg", ["x"], ["a"], name="a"),
             helper.make_node("Concat", ["a", "a"], ["c"], name="c", axis=1),
             helper.make_node("Neg", ["c"], ["y"], name="y")]
    model = _model(nodes, [_value("x", [1, 4, 16])], [_value("y", [1, 8, 16])],
                   [_value("a", [1, 4, 16]), _value("c", [1, 8, 16])])
    session = _session(make_registry, model)
    assert _parts_by_name(session) == {"a": 0}
    x = np.random.default_rng(4).standard_normal((1, 4, 16)).astype(np.float32)
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], np.concatenate([x, x], axis=1))


def test_a_chain_of_concatenations_lives_in_the_last_ones_buffer(make_registry):
    """DenseNet's shape: c1 = [x', a], c2 = [c1, b] with b read from c1; every part inside c2's
    buffer, each concatenation finding its inputs in place, and c1 still read right after c2
    is written."""
    nodes = [helper.make_node("Neg", ["x"], ["x1"], name="x1"), helper.make_node("Neg", ["x1"], ["a"], name="a"),
             helper.make_node("Concat", ["x1", "a"], ["c1"], name="c1", axis=1),
             helper.make_node("Neg", ["c1"], ["b"], name="b"),
             helper.make_node("Concat", ["c1", "b"], ["c2"], name="c2", axis=1),
             helper.make_node("Neg", ["c2"], ["y"], name="y"), helper.make_node("Neg", ["c1"], ["late"], name="late"),
             helper.make_node("Concat", ["late", "y"], ["z"], name="z", axis=1)]
    model = _model(nodes, [_value("x", [1, 2, 16])], [_value("z", [1, 12, 16])],
                   [_value("x1", [1, 2, 16]), _value("a", [1, 2, 16]), _value("c1", [1, 4, 16]),
                    _value("b", [1, 4, 16]), _value("c2", [1, 8, 16]), _value("y", [1, 8, 16]),
                    _value("late", [1, 4, 16])])
    session = _session(make_registry, model)
    parts = _parts_by_name(session)
    line = 2 * 16 * 4
    assert {k: parts[k] for k in ("x1", "a", "c1", "b")} == {"x1": 0, "a": line, "c1": 0, "b": 2 * line}
    x = np.random.default_rng(5).standard_normal((1, 2, 16)).astype(np.float32)
    c1 = np.concatenate([-x, x], axis=1)
    want = np.concatenate([-c1, -np.concatenate([c1, -c1], axis=1)], axis=1)
    for _ in range(3):
        np.testing.assert_array_equal(session.run(None, {"x": x})[0], want)


def test_place_parts_skips_producers_without_out_and_unknown_shapes():
    concat = _concat(None)
    neg = _neg(None)
    specs = {0: (np.dtype(np.float32), (1, 4, 16)), 1: (np.dtype(np.float32), (1, 4, 16)),
             2: (np.dtype(np.float32), (1, 8, 16))}
    # steps: 0 -> slot 0 (no out=), 1 -> slot 1, concat(0, 1) -> slot 2
    fns = [lambda x: x, neg, concat]
    placed = place_parts(fns, [(9,), (9,), (0, 1)], [(0,), (1,), (2,)], [False, True, True], set(), specs.get)
    assert placed == {1: (2, 256)}
    assert place_parts(fns, [(9,), (9,), (0, 1)], [(0,), (1,), (2,)], [False, True, True], set(),
                       lambda slot: None if slot == 2 else specs.get(slot)) == {}


def test_arena_views_sit_at_their_offsets():
    layout = ArenaLayout((512,), ((0, 0, np.dtype(np.float32), (1, 8, 16)), (1, 0, np.dtype(np.float32), (1, 4, 16))),
                         {1: 256})
    views = ArenaPool(layout, 2).acquire()
    assert views[1].ctypes.data == views[0].ctypes.data + 256
    assert np.shares_memory(views[0], views[1])


def test_a_part_written_early_keeps_its_region_until_the_concatenation(make_registry):
    """a is written first, then t1 and t2 (each c's size) live and die before b and c: c's
    buffer must be held from a's step on, or t1 would be planned into it and overwrite a."""
    nodes = [helper.make_node("Neg", ["x"], ["a"], name="a"), helper.make_node("Neg", ["w"], ["t1"], name="t1"),
             helper.make_node("Neg", ["t1"], ["t2"], name="t2"), helper.make_node("Neg", ["t2"], ["u"], name="u"),
             helper.make_node("Neg", ["x"], ["b"], name="b"),
             helper.make_node("Concat", ["a", "b"], ["c"], name="c", axis=1),
             helper.make_node("Neg", ["c"], ["y"], name="y")]
    model = _model(nodes, [_value("x", [1, 4, 16]), _value("w", [1, 8, 16])],
                   [_value("y", [1, 8, 16]), _value("u", [1, 8, 16])],
                   [_value("a", [1, 4, 16]), _value("b", [1, 4, 16]), _value("c", [1, 8, 16]),
                    _value("t1", [1, 8, 16]), _value("t2", [1, 8, 16])])
    session = _session(make_registry, model)
    assert _parts_by_name(session) == {"a": 0, "b": 256}
    rng = np.random.default_rng(6)
    x, w = rng.standard_normal((1, 4, 16)).astype(np.float32), rng.standard_normal((1, 8, 16)).astype(np.float32)
    for _ in range(2):
        y, u = session.run(None, {"x": x, "w": w})
        np.testing.assert_array_equal(y, np.concatenate([x, x], axis=1))
        np.testing.assert_array_equal(u, -w)


def test_a_declaration_the_planner_cannot_trust_places_nothing():
    """out_parts that raises, answers for the wrong number of inputs, overlaps two inputs or
    reaches past the output: nothing is placed (the concatenation copies), nothing raises."""
    neg = _neg(None)
    specs = {0: (np.dtype(np.float32), (1, 4, 16)), 1: (np.dtype(np.float32), (1, 4, 16)),
             2: (np.dtype(np.float32), (1, 8, 16))}

    def broken(answer):
        def run(*xs, out=None):
            return np.concatenate(xs, axis=1)

        run.supports_out = True
        setattr(run, OUT_PARTS, answer)
        return run

    def boom(out_shape, shapes):
        raise RuntimeError("a provider bug")

    for answer in (boom, lambda o, s: [0], lambda o, s: [0, 32], lambda o, s: [0, 100], lambda o, s: [-64, 0],
                   lambda o, s: ["0", 64]):
        fns = [neg, neg, broken(answer)]
        assert place_parts(fns, [(9,), (9,), (0, 1)], [(0,), (1,), (2,)], [True, True, True], set(), specs.get) == {}
    good = broken(lambda o, s: [0, 64])
    assert place_parts([neg, neg, good], [(9,), (9,), (0, 1)], [(0,), (1,), (2,)], [True, True, True], set(),
                       specs.get) == {0: (2, 0), 1: (2, 256)}
