"""com.microsoft DynamicQuantizeLSTM, as onnxruntime's ``quantize_dynamic`` writes it for LSTM.

Inputs: ``X, W, R, B?, sequence_lens?, initial_h?, initial_c?, P?, W_scale, W_zero_point,
R_scale, R_zero_point``; W [D, I, 4H] and R [D, H, 4H] are 8-bit and already transposed;
scales and zero points are per direction [D] or per column [D, 4H]. Attributes are LSTM's
(no ``layout``). Gate order i, o, f, c as in ONNX.

Like onnxruntime, each GEMM quantizes its float operand dynamically (uint8, per tensor,
range including 0, as DynamicQuantizeLinear): X once for the whole sequence of a direction,
the whole batch's hidden state once per step; the exact integer product is scaled by
``a_scale * w_scale``. The cell is ``rnn.py``'s float LSTM cell and recurrence. This equals
onnxruntime run with one intra-op thread; with more, onnxruntime splits the batch of the
hidden-state GEMM into per-thread chunks and quantizes each chunk with its own range, so its
outputs then depend on its thread count (differences of the order of the quantization
step, ~1e-3 here). onnxruntime requires zero weight zero points; any are accepted here.

Known difference: with ``sequence_lens`` where some rows end early, outputs differ from
onnxruntime's by ~1e-3 (the quantization step): the hidden-state rows it quantizes after a
row has ended are evidently not the frozen states used here (not pinned down further);
equal lengths match to float rounding.
"""

from __future__ import annotations

import numpy as np

from epoxy.contract import NodeSpec

from ..registry import KERNELS
from ._contrib_util import bad_attribute
from .contrib_quantized import dynamic_quantize_u8, int_matmul
from .rnn import _Config, _run_recurrence

MS = "com.microsoft"


def _per_direction(v: np.ndarray | None, d: int) -> np.ndarray | None:
    """Direction ``d``'s scale / zero point: a scalar or a [4H] row."""
    if v is None:
        return None
    v = np.asarray(v)
    return v.reshape(-1)[d] if v.ndim <= 1 else v[d].reshape(-1)


def _qgemm(a: np.ndarray, w: np.ndarray, w_scale: np.ndarray, w_zp: np.ndarray | None) -> np.ndarray:
    """``a @ dequant(w)`` the way onnxruntime's quantized RNN GEMM computes it (float32)."""
    qa, a_scale, a_zp = dynamic_quantize_u8(a)
    acc = int_matmul(qa, w, np.asarray(a_zp), w_zp)
    return acc.astype(np.float32) * (np.float32(a_scale) * np.asarray(w_scale, np.float32))



@KERNELS.register("DynamicQuantizeLSTM", 1, domain=MS)
def dynamic_quantize_lstm(node: NodeSpec):
    cfg = _Config(node, ("Sigmoid", "Tanh", "Tanh"))
    hidden_attr = node.attr("hidden_size")
    if hidden_attr is not None and int(hidden_attr) <= 0:
        raise bad_attribute(node, "hidden_size", hidden_attr, "a positive int")
    input_forget = int(node.attr("input_forget", 0))
    if input_forget not in (0, 1):
        raise bad_attribute(node, "input_forget", input_forget, "0 or 1")

    def run(X, W, R, B=None, sequence_lens=None, initial_h=None, initial_c=None, P=None,
            W_scale=None, W_zero_point=None, R_scale=None, R_zero_point=None):
        xt = X.astype(np.float32)
        seq_len, batch, _ = xt.shape
        hidden = R.shape[1]
        cd = np.dtype(np.float32)
        bias = np.zeros((cfg.num_dirs, 8 * hidden), cd) if B is None else B.astype(cd)
        h0 = np.zeros((cfg.num_dirs, batch, hidden), cd) if initial_h is None else initial_h.astype(cd)
        c0 = np.zeros_like(h0) if initial_c is None else initial_c.astype(cd)
        peep = np.zeros((cfg.num_dirs, 3 * hidden), cd) if P is None else P.astype(cd)
        lens = None
        if sequence_lens is not None:
            lens = np.asarray(sequence_lens).astype(np.int64).reshape(-1)
            if np.all(lens >= seq_len):
                lens = None

        def dir_fn(d: int):
            wd, rd = W[d], R[d]
            ws, wz = _per_direction(W_scale, d), _per_direction(W_zero_point, d)
            rs, rz = _per_direction(R_scale, d), _per_direction(R_zero_point, d)
            xw = _qgemm(xt.reshape(seq_len * batch, -1), wd, ws, wz).reshape(seq_len, batch, 4 * hidden)
            b = bias[d, :4 * hidden] + bias[d, 4 * hidden:]
            pi, po, pf = peep[d, :hidden], peep[d, hidden:2 * hidden], peep[d, 2 * hidden:]
            f, g, hf = cfg.acts[d]

            def step(t: int, states: list) -> list:
                h, cell = states
                gates = xw[t] + _qgemm(h, rd, rs, rz) + b
                i = f(cfg.clipped(gates[:, :hidden] + pi * cell))
                fg = 1 - i if input_forget else f(cfg.clipped(gates[:, 2 * hidden:3 * hidden] + pf * cell))
                cc = g(cfg.clipped(gates[:, 3 * hidden:]))
                new_c = fg * cell + i * cc
                o = f(cfg.clipped(gates[:, hidden:2 * hidden] + po * new_c))
                return [o * hf(new_c), new_c]

            return step, [h0[d], c0[d]]

        y, (yh, yc) = _run_recurrence(cfg, xt, hidden, lens, dir_fn)
        return cfg.finish(X.dtype, y, yh, yc)

    return run
