"""Recurrent layers: RNN, GRU, LSTM (forward / reverse / bidirectional, layout, sequence_lens).

The input projections of every time step are computed in one matmul per direction; only
the recurrence itself loops over time (it is inherently sequential), vectorized over the
batch. Shorter sequences (``sequence_lens``) keep their state frozen past their length and
write zeros to ``Y`` there; reverse directions start at each sequence's own last step.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from epoxy.contract import NodeSpec
from epoxy.kit import Unsupported

from ..registry import KERNELS
from ._attr_checks import invalid, static_dim
from ._flags import flag

Act = Callable[[np.ndarray], np.ndarray]


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # numerically stable logistic
    out = np.empty_like(x)
    pos = x >= 0
    out[pos] = 1.0 / (1.0 + np.exp(-x[pos]))
    ex = np.exp(x[~pos])
    out[~pos] = ex / (1.0 + ex)
    return out


#: name -> (needs alpha, needs beta, default alpha, default beta, builder)
_ACTIVATIONS: dict[str, tuple[bool, bool, float, float, Callable[[float, float], Act]]] = {
    "relu": (False, False, 0.0, 0.0, lambda a, b: lambda x: np.maximum(x, 0)),
    "tanh": (False, False, 0.0, 0.0, lambda a, b: np.tanh),
    "sigmoid": (False, False, 0.0, 0.0, lambda a, b: _sigmoid),
    "affine": (True, True, 1.0, 0.0, lambda a, b: lambda x: a * x + b),
    "leakyrelu": (True, False, 0.01, 0.0, lambda a, b: lambda x: np.where(x >= 0, x, a * x)),
    "thresholdedrelu": (True, False, 1.0, 0.0, lambda a, b: lambda x: np.where(x > a, x, 0.0)),
    "scaledtanh": (True, True, 1.0, 1.0, lambda a, b: lambda x: a * np.tanh(b * x)),
    "hardsigmoid": (True, True, 0.2, 0.5, lambda a, b: lambda x: np.clip(a * x + b, 0.0, 1.0)),
    "elu": (True, False, 1.0, 0.0, lambda a, b: lambda x: np.where(x >= 0, x, a * (np.exp(np.minimum(x, 0)) - 1.0))),
    "softsign": (False, False, 0.0, 0.0, lambda a, b: lambda x: x / (1.0 + np.abs(x))),
    "softplus": (False, False, 0.0, 0.0, lambda a, b: lambda x: np.logaddexp(0.0, x)),
}


def _parse_activations(node: NodeSpec, defaults: tuple[str, ...], num_dirs: int) -> list[list[Act]]:
    names = node.attr("activations")
    per_dir = len(defaults)
    if names is None:
        names = defaults * num_dirs
    names = [n.decode() if isinstance(n, bytes) else str(n) for n in names]
    if len(names) == per_dir and num_dirs == 2:
        names = names * 2
    if len(names) != per_dir * num_dirs:
        raise Unsupported(f"{node.op_type} expects {per_dir * num_dirs} activations, got {len(names)}")
    alphas = list(node.attr("activation_alpha", ()) or ())
    betas = list(node.attr("activation_beta", ()) or ())
    acts: list[Act] = []
    for name in names:
        spec = _ACTIVATIONS.get(name.lower())
        if spec is None:
            raise Unsupported(f"unsupported activation {name!r}")
        needs_a, needs_b, da, db, build = spec
        a = float(alphas.pop(0)) if needs_a and alphas else da
        b = float(betas.pop(0)) if needs_b and betas else db
        acts.append(build(a, b))
    return [acts[d * per_dir:(d + 1) * per_dir] for d in range(num_dirs)]


class _Config:
    def __init__(self, node: NodeSpec, default_acts: tuple[str, ...], gates: int | None = None) -> None:
        self.node = node
        self.gates = gates
        direction = node.attr("direction", "forward")
        direction = direction.decode() if isinstance(direction, bytes) else str(direction)
        if direction not in ("forward", "reverse", "bidirectional"):
            raise Unsupported(f"unknown direction {direction!r}")
        self.num_dirs = 2 if direction == "bidirectional" else 1
        self.reverse = [direction == "reverse"] if self.num_dirs == 1 else [False, True]
        self.hidden_size = node.attr("hidden_size")
        self.layout = int(node.attr("layout", 0)) if node.opset >= 14 else 0
        if self.layout not in (0, 1):
            raise invalid(node, f"attribute 'layout' = {self.layout} must be 0 or 1")
        if self.hidden_size is not None and gates is not None:
            self.check_hidden(static_dim(node, 1, 1), static_dim(node, 2, 1), static_dim(node, 2, 2))
        clip = node.attr("clip")
        self.clip = None if clip is None else float(clip)
        self.acts = _parse_activations(node, default_acts, self.num_dirs)
        self.n_out = len(node.outputs)

    def check_hidden(self, w_rows: int | None, r_rows: int | None, r_cols: int | None) -> None:
        """``hidden_size`` must be what W and R are shaped for (W [D, gates*H, I], R [D,
        gates*H, H]): the outputs are allocated from it, so a hostile value is refused
        here, with the static shapes at session creation and the real ones before a run."""
        h, gates = int(self.hidden_size), int(self.gates or 1)  # type: ignore[arg-type]
        if h < 1:
            raise invalid(self.node, f"attribute 'hidden_size' = {h} must be >= 1")
        for what, got, want in (("R's last dim", r_cols, h), ("R's dim 1", r_rows, gates * h),
                                ("W's dim 1", w_rows, gates * h)):
            if got is not None and got != want:
                raise invalid(self.node, f"attribute 'hidden_size' = {h} does not match the weights: "
                                         f"{what} is {got}, expected {want} ({gates} gates)")

    def cdtype(self, x: np.ndarray) -> np.dtype:
        return np.dtype(np.float64) if x.dtype == np.float64 else np.dtype(np.float32)

    def clipped(self, v: np.ndarray) -> np.ndarray:
        return v if self.clip is None else np.clip(v, -self.clip, self.clip)

    def to_time_major(self, x: np.ndarray | None) -> np.ndarray | None:
        """layout=1 inputs [batch, seq|dirs, ...] -> [seq|dirs, batch, ...]."""
        if x is None or self.layout == 0:
            return x
        return np.swapaxes(x, 0, 1)

    def finish(self, x_dtype: np.dtype, y: np.ndarray, *states: np.ndarray) -> tuple:
        """y: [T, D, N, H] and states [D, N, H] in compute dtype -> outputs per layout."""
        if self.layout == 1:
            y = np.transpose(y, (2, 0, 1, 3))
            states = tuple(np.swapaxes(s, 0, 1) for s in states)
        outs = (y.astype(x_dtype, copy=False),) + tuple(s.astype(x_dtype, copy=False) for s in states)
        outs = tuple(np.ascontiguousarray(o) for o in outs)
        return outs[: self.n_out] if self.n_out > 1 else outs[0]


def _step_mask(seq_lens: np.ndarray | None, t: int) -> np.ndarray | None:
    """(N, 1) bool: which batch entries are still inside their sequence at time t."""
    if seq_lens is None:
        return None
    return (t < seq_lens)[:, None]


def _run_recurrence(
    cfg: _Config, x: np.ndarray, hidden: int, seq_lens: np.ndarray | None, dir_fn
):
    """Drive ``dir_fn(d) -> (step, initial states)`` over time for every direction.

    ``step(t, states)`` returns the new states, hidden state first. Returns ``Y`` as
    [T, D, N, H] and the final states stacked over directions ([D, N, H] each).
    """
    seq_len, batch = x.shape[0], x.shape[1]
    y = np.zeros((seq_len, cfg.num_dirs, batch, hidden), dtype=x.dtype)
    finals: list[list[np.ndarray]] = []
    for d in range(cfg.num_dirs):
        step, states = dir_fn(d)
        order = range(seq_len - 1, -1, -1) if cfg.reverse[d] else range(seq_len)
        for t in order:
            new_states = step(t, states)
            mask = _step_mask(seq_lens, t)
            if mask is None:
                states = new_states
                y[t, d] = new_states[0]
            else:
                states = [np.where(mask, n, o) for n, o in zip(new_states, states)]
                y[t, d] = np.where(mask, new_states[0], 0)
        finals.append(states)
    return y, [np.stack([f[i] for f in finals]) for i in range(len(finals[0]))]


def _common_inputs(cfg: _Config, X, W, R, B, sequence_lens, initial_h, nb: int):
    """Time-major inputs in the compute dtype, zero defaults, and the effective lengths."""
    xt = cfg.to_time_major(X)
    cd = cfg.cdtype(X)
    xt = xt.astype(cd, copy=False)
    seq_len, batch = xt.shape[0], xt.shape[1]
    if cfg.hidden_size is not None and cfg.gates is not None:
        cfg.check_hidden(W.shape[1] if W.ndim == 3 else None, R.shape[1] if R.ndim == 3 else None, R.shape[-1])
    H = int(cfg.hidden_size) if cfg.hidden_size is not None else R.shape[-1]
    W = W.astype(cd, copy=False)
    R = R.astype(cd, copy=False)
    B = np.zeros((cfg.num_dirs, nb * H), dtype=cd) if B is None else B.astype(cd, copy=False)
    h0 = cfg.to_time_major(initial_h)
    h0 = np.zeros((cfg.num_dirs, batch, H), dtype=cd) if h0 is None else h0.astype(cd, copy=False)
    lens = None
    if sequence_lens is not None:
        lens = np.asarray(sequence_lens).astype(np.int64).reshape(-1)
        if np.all(lens >= seq_len):
            lens = None
    return xt, W, R, B, h0, lens, H, cd


@KERNELS.register("RNN", (1, 7, 14, 22))
def rnn(node: NodeSpec):
    cfg = _Config(node, ("Tanh",), 1)

    def run(X, W, R, B=None, sequence_lens=None, initial_h=None):
        xt, W_, R_, B_, h0, lens, H, cd = _common_inputs(cfg, X, W, R, B, sequence_lens, initial_h, 2)

        def dir_fn(d: int):
            xw = xt @ W_[d].T + (B_[d, :H] + B_[d, H:])
            rT = R_[d].T
            f = cfg.acts[d][0]

            def step(t: int, states: list) -> list:
                return [f(cfg.clipped(xw[t] + states[0] @ rT))]

            return step, [h0[d]]

        y, (yh,) = _run_recurrence(cfg, xt, H, lens, dir_fn)
        return cfg.finish(X.dtype, y, yh)

    return run


@KERNELS.register("GRU", (1, 3, 7, 14, 22))
def gru(node: NodeSpec):
    cfg = _Config(node, ("Sigmoid", "Tanh"), 3)
    lbr = int(node.attr("linear_before_reset", 0)) if node.opset >= 3 else 0

    def run(X, W, R, B=None, sequence_lens=None, initial_h=None):
        xt, W_, R_, B_, h0, lens, H, cd = _common_inputs(cfg, X, W, R, B, sequence_lens, initial_h, 6)

        def dir_fn(d: int):
            wb, rb = B_[d, : 3 * H], B_[d, 3 * H:]
            xw = xt @ W_[d].T + wb  # [T, N, 3H] in z, r, h order
            r_zr_T = R_[d, : 2 * H].T
            r_h_T = R_[d, 2 * H:].T
            rb_zr, rb_h = rb[: 2 * H], rb[2 * H:]
            f, g = cfg.acts[d]

            def step(t: int, states: list) -> list:
                h = states[0]
                zr = f(cfg.clipped(xw[t, :, : 2 * H] + h @ r_zr_T + rb_zr))
                z, r = zr[:, :H], zr[:, H:]
                if lbr:
                    hh = g(cfg.clipped(xw[t, :, 2 * H:] + r * (h @ r_h_T + rb_h)))
                else:
                    hh = g(cfg.clipped(xw[t, :, 2 * H:] + (r * h) @ r_h_T + rb_h))
                return [(1 - z) * hh + z * h]

            return step, [h0[d]]

        y, (yh,) = _run_recurrence(cfg, xt, H, lens, dir_fn)
        return cfg.finish(X.dtype, y, yh)

    return run


@KERNELS.register("LSTM", (1, 7, 14, 22))
def lstm(node: NodeSpec):
    cfg = _Config(node, ("Sigmoid", "Tanh", "Tanh"), 4)
    input_forget = flag(node, "input_forget", 0)

    def run(
        X, W, R, B=None, sequence_lens=None, initial_h=None, initial_c=None, P=None
    ):
        xt, W_, R_, B_, h0, lens, H, cd = _common_inputs(cfg, X, W, R, B, sequence_lens, initial_h, 8)
        c0 = cfg.to_time_major(initial_c)
        c0 = np.zeros_like(h0) if c0 is None else c0.astype(cd, copy=False)
        P_ = np.zeros((cfg.num_dirs, 3 * H), dtype=cd) if P is None else P.astype(cd, copy=False)

        def dir_fn(d: int):
            xw = xt @ W_[d].T + (B_[d, : 4 * H] + B_[d, 4 * H:])  # [T, N, 4H] in i, o, f, c order
            rT = R_[d].T
            pi, po, pf = P_[d, :H], P_[d, H: 2 * H], P_[d, 2 * H:]
            f, g, hf = cfg.acts[d]

            def step(t: int, states: list) -> list:
                h, cell = states
                gates = xw[t] + h @ rT
                i = f(cfg.clipped(gates[:, :H] + pi * cell))
                if input_forget:
                    fg = 1 - i
                else:
                    fg = f(cfg.clipped(gates[:, 2 * H: 3 * H] + pf * cell))
                cc = g(cfg.clipped(gates[:, 3 * H:]))
                new_c = fg * cell + i * cc
                o = f(cfg.clipped(gates[:, H: 2 * H] + po * new_c))
                return [o * hf(new_c), new_c]

            return step, [h0[d], c0[d]]

        y, (yh, yc) = _run_recurrence(cfg, xt, H, lens, dir_fn)
        return cfg.finish(X.dtype, y, yh, yc)

    return run
