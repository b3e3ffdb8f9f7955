"""Kernels for If, Loop, Scan (opset 8 and 9+) and SequenceMap.

Each factory compiles the node's subgraphs once (``ctx.compile``) and returns a callable
taking the node's explicit inputs followed by its implicit (outer-scope) inputs. What the
spec requires of the node and its bodies was checked before (``spec_checks``).

Every iteration checks the run's stop condition (``RunOptions.terminate``, the run's time
bound), and a body stopped inside says which iteration it was in.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..contract import KernelFn, NodeSpec, ValueType
from ..errors import RunTerminatedError
from ..run.executor import check_terminated
from ..run.limits import ITEM_OVERHEAD, check_loop, value_nbytes
from .subplan import CompileContext, SubPlan


def _truth(value: Any, what: str) -> bool:
    arr = np.asarray(value)
    if arr.dtype != np.bool_:  # a float condition would loop for ever on 1.0 (its type was unknown at creation)
        raise TypeError(f"{what} must be a bool tensor (the spec's tensor(bool)), got {arr.dtype}")
    if arr.size != 1:
        raise ValueError(f"{what} must hold exactly one element, got shape {list(arr.shape)}")
    return bool(arr.reshape(-1)[0])


def _run_body(body: SubPlan, feeds: list[Any], where: str) -> list[Any]:
    """``body.run(feeds)``; a stop inside the body says in which node and iteration it was."""
    try:
        return body.run(feeds)
    except RunTerminatedError as exc:
        raise RunTerminatedError(f"{exc} (in {where})") from None


def _outer_values(args: Sequence[Any], n_explicit: int, positions: Sequence[int]) -> list[Any]:
    return [args[n_explicit + p] for p in positions]


def _result(values: Sequence[Any], n_outputs: int) -> Any:
    values = list(values)[:n_outputs] + [None] * max(0, n_outputs - len(values))
    return values[0] if n_outputs == 1 else tuple(values)


def _empty_stack(vt: ValueType, axis: int = 0) -> np.ndarray:
    """A zero-length stack of values typed ``vt`` (no iteration ran)."""
    dtype = vt.dtype if vt.kind == "tensor" and vt.dtype is not None else np.dtype(np.float32)
    dims: list[int] = []
    if vt.kind == "tensor" and vt.shape is not None:
        dims = [d if isinstance(d, int) else 0 for d in vt.shape]
    rank = len(dims) + 1
    axis = axis + rank if axis < 0 else axis
    dims.insert(axis, 0)
    return np.empty(dims, dtype=dtype)


def _stack(values: list[Any], vt: ValueType, axis: int = 0, reverse: bool = False) -> np.ndarray:
    if not values:
        return _empty_stack(vt, axis)
    arrays = [np.asarray(v) for v in (values[::-1] if reverse else values)]
    return np.stack(arrays, axis=axis)


# -- If ---------------------------------------------------------------------------------------
def if_factory(node: NodeSpec, ctx: CompileContext) -> KernelFn:
    then_sub = ctx.compile("then_branch")
    else_sub = ctx.compile("else_branch")
    n_outputs = len(node.outputs)  # each branch has as many outputs (spec_checks)
    n_explicit = len(node.inputs)
    then_pos, else_pos = ctx.outer_positions(then_sub), ctx.outer_positions(else_sub)
    then_where, else_where = f"the then_branch of If {node.name!r}", f"the else_branch of If {node.name!r}"

    def run(cond: Any, *rest: Any) -> Any:
        args = (cond, *rest)
        if _truth(cond, "If condition"):
            sub, pos, where = then_sub, then_pos, then_where
        else:
            sub, pos, where = else_sub, else_pos, else_where
        return _result(_run_body(sub, _outer_values(args, n_explicit, pos), where), n_outputs)

    return run


# -- Loop -------------------------------------------------------------------------------------
def loop_factory(node: NodeSpec, ctx: CompileContext) -> KernelFn:
    body = ctx.compile("body")
    n_explicit = len(node.inputs)
    n_carried = n_explicit - 2  # the body's inputs and outputs fit these counts (spec_checks)
    n_scan = body.n_outputs - 1 - n_carried
    scan_types = body.output_types[1 + n_carried:]
    positions = ctx.outer_positions(body)
    n_outputs = len(node.outputs)
    memory_limit, max_iterations = ctx.owner.memory_limit, ctx.owner.max_loop_iterations
    guarded = memory_limit is not None or max_iterations is not None

    def run(*args: Any) -> Any:
        trip_count, cond = args[0], args[1]
        carried = list(args[2:n_explicit])
        outer = _outer_values(args, n_explicit, positions)
        limit = None if trip_count is None else int(np.asarray(trip_count).reshape(-1)[0])
        going = True if cond is None else _truth(cond, "Loop cond")
        scans: list[list[Any]] = [[] for _ in range(n_scan)]
        i = scan_bytes = 0
        while going and (limit is None or i < limit):
            check_terminated(f"Loop {node.name!r} iteration {i}")
            outs = _run_body(body, [np.array(i, dtype=np.int64), np.array(going, dtype=np.bool_), *carried, *outer],
                             f"Loop {node.name!r} iteration {i}")
            carried = outs[1:1 + n_carried]
            for k in range(n_scan):
                scans[k].append(outs[1 + n_carried + k])
            if cond is not None:  # without a cond input the body's cond output is ignored
                going = _truth(outs[0], "Loop body cond output")
            i += 1
            if guarded:
                step = sum(value_nbytes(scans[k][-1]) + ITEM_OVERHEAD for k in range(n_scan))
                scan_bytes += step
                check_loop(node.name, i, limit, value_nbytes(carried) + scan_bytes, step, memory_limit, max_iterations)
        results = carried + [_stack(scans[k], scan_types[k]) for k in range(n_scan)]
        return _result(results, n_outputs)

    return run


# -- Scan -------------------------------------------------------------------------------------
def _scan_common(body: SubPlan, n_state: int) -> tuple[int, list[ValueType]]:
    """Scan outputs: how many and their types (the counts fit the node: spec_checks)."""
    return body.n_outputs - n_state, body.output_types[n_state:]


def _ints(value: Any, count: int, default: int = 0) -> list[int]:
    """A per-input attribute (its length was checked: spec_checks), or its default."""
    return [default] * count if value is None else [int(v) for v in value]


def scan9_factory(node: NodeSpec, ctx: CompileContext) -> KernelFn:
    body = ctx.compile("body")
    n_explicit = len(node.inputs)
    n_scan_in = int(node.attr("num_scan_inputs", 0))
    n_state = n_explicit - n_scan_in
    n_scan_out, scan_types = _scan_common(body, n_state)
    in_axes = _ints(node.attr("scan_input_axes"), n_scan_in)
    in_dirs = _ints(node.attr("scan_input_directions"), n_scan_in)
    out_axes = _ints(node.attr("scan_output_axes"), n_scan_out)
    out_dirs = _ints(node.attr("scan_output_directions"), n_scan_out)
    positions = ctx.outer_positions(body)
    n_outputs = len(node.outputs)

    def run(*args: Any) -> Any:
        states = list(args[:n_state])
        outer = _outer_values(args, n_explicit, positions)
        seqs = []
        for x, axis, direction in zip(args[n_state:n_explicit], in_axes, in_dirs):
            x = np.asarray(x)
            seq = np.moveaxis(x, axis + x.ndim if axis < 0 else axis, 0)
            seqs.append(seq[::-1] if direction else seq)
        length = seqs[0].shape[0]
        if any(s.shape[0] != length for s in seqs):
            raise ValueError(f"Scan: scan inputs have different lengths {[s.shape[0] for s in seqs]}")
        collected: list[list[Any]] = [[] for _ in range(n_scan_out)]
        for t in range(length):
            check_terminated(f"Scan {node.name!r} step {t}")
            outs = _run_body(body, [*states, *(s[t] for s in seqs), *outer], f"Scan {node.name!r} step {t}")
            states = outs[:n_state]
            for k in range(n_scan_out):
                collected[k].append(outs[n_state + k])
        results = states + [
            _stack(collected[k], scan_types[k], out_axes[k], bool(out_dirs[k])) for k in range(n_scan_out)
        ]
        return _result(results, n_outputs)

    return run


def scan8_factory(node: NodeSpec, ctx: CompileContext) -> KernelFn:
    """Scan-8: batched (axis 0), sequence axis 1, optional per-batch ``sequence_lens``."""
    body = ctx.compile("body")
    n_explicit = len(node.inputs)
    n_scan_in = int(node.attr("num_scan_inputs", 0))
    n_state = n_explicit - 1 - n_scan_in
    n_scan_out, scan_types = _scan_common(body, n_state)
    dirs = _ints(node.attr("directions"), n_scan_in)
    positions = ctx.outer_positions(body)
    n_outputs = len(node.outputs)

    def run(*args: Any) -> Any:
        seq_lens = args[0]
        states_in = [np.asarray(s) for s in args[1:1 + n_state]]
        xs = [np.asarray(x) for x in args[1 + n_state:n_explicit]]
        outer = _outer_values(args, n_explicit, positions)
        batch, max_len = xs[0].shape[0], xs[0].shape[1]
        lens = [max_len] * batch if seq_lens is None else [int(v) for v in np.asarray(seq_lens).reshape(-1)]
        final_states: list[list[Any]] = [[] for _ in range(n_state)]
        outputs: list[list[Any]] = [[] for _ in range(n_scan_out)]
        for b in range(batch):
            states = [s[b] for s in states_in]
            per_step: list[list[Any]] = [[] for _ in range(n_scan_out)]
            n = lens[b]
            for t in range(n):
                check_terminated(f"Scan {node.name!r} batch {b} step {t}")
                slices = [x[b, n - 1 - t] if d else x[b, t] for x, d in zip(xs, dirs)]
                outs = _run_body(body, [*states, *slices, *outer], f"Scan {node.name!r} batch {b} step {t}")
                states = outs[:n_state]
                for k in range(n_scan_out):
                    per_step[k].append(outs[n_state + k])
            for k, s in enumerate(states):
                final_states[k].append(np.asarray(s))
            for k in range(n_scan_out):
                stacked = _stack(per_step[k], scan_types[k])
                if stacked.shape[0] < max_len:  # shorter sequences are padded with zeros
                    pad = np.zeros((max_len - stacked.shape[0], *stacked.shape[1:]), dtype=stacked.dtype)
                    stacked = np.concatenate([stacked, pad], axis=0)
                outputs[k].append(stacked)
        results = [np.stack(v) if v else np.asarray(s)[:0] for v, s in zip(final_states, states_in)]
        results += [np.stack(v) if v else _empty_stack(scan_types[k], 0)[None][:0] for k, v in enumerate(outputs)]
        return _result(results, n_outputs)

    return run


def scan_factory(node: NodeSpec, ctx: CompileContext) -> KernelFn:
    return scan8_factory(node, ctx) if node.opset < 9 else scan9_factory(node, ctx)


# -- SequenceMap ----------------------------------------------------------------------------
def sequence_map_factory(node: NodeSpec, ctx: CompileContext) -> KernelFn:
    body = ctx.compile("body")
    n_explicit = len(node.inputs)  # the body takes and gives as many values (spec_checks)
    n_outputs = len(node.outputs)
    positions = ctx.outer_positions(body)

    def run(*args: Any) -> Any:
        sequence = args[0]
        if not isinstance(sequence, (list, tuple)):
            raise TypeError(f"SequenceMap: input_sequence must be a sequence, got {type(sequence).__name__}")
        extras = args[1:n_explicit]
        outer = _outer_values(args, n_explicit, positions)
        count = len(sequence)
        for k, extra in enumerate(extras):
            if isinstance(extra, (list, tuple)) and len(extra) != count:
                raise ValueError(f"SequenceMap: input {k + 1} has {len(extra)} elements, input 0 has {count}")
        results: list[list[Any]] = [[] for _ in range(n_outputs)]
        for i in range(count):
            check_terminated(f"SequenceMap {node.name!r} element {i}")
            feeds = [sequence[i], *(e[i] if isinstance(e, (list, tuple)) else e for e in extras), *outer]
            for k, value in enumerate(_run_body(body, feeds, f"SequenceMap {node.name!r} element {i}")):
                results[k].append(value)
        return _result(results, n_outputs)

    return run


def _gradient_factory(node: NodeSpec, ctx: Any) -> KernelFn:
    from .gradient import gradient_factory

    return gradient_factory(node, ctx)


#: (domain, op_type) -> kernel factory for the nodes the core runs itself
FACTORIES = {
    ("", "If"): if_factory,
    ("", "Loop"): loop_factory,
    ("", "Scan"): scan_factory,
    ("", "SequenceMap"): sequence_map_factory,
    ("ai.onnx.preview.training", "Gradient"): _gradient_factory,
}
