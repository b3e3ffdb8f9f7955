"""``--mode auto``: which candidates to try for the target, and which one wins.

The rule is the issue's: the fastest candidate whose relative error on the held-out data is
within the budget and that is not slower than fp32; when none qualifies the float model is
kept, and the report says so. Evaluating a candidate (quantize, check, time) is the tool's
job; this module only lists and judges, so the rule is testable without running models.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from epoxy.quantization.report import AutoTrial
from epoxy.quantization.schemes import SchemeOptions, float_candidates


@dataclass(frozen=True)
class Candidate:
    """A mode with its options, under a label for the table (``static per-channel``)."""

    label: str
    mode: str
    options: SchemeOptions


def candidates(base: SchemeOptions, providers: tuple[str, ...], features: frozenset[str],
               available: set[str], has_calibration: bool) -> list[Candidate]:
    """Static per-channel and per-tensor (with calibration data), and per-channel over the other
    op set (the weighted layers alone where the target's default is the whole int8 chain, the
    whole chain where it is the weighted layers) when the user named none; dynamic when
    installed; the float modes the target computes natively.

    Why both op sets: which is faster depends on the model (cpu, 1 thread, session 22: the
    whole chain ran resnet50 1.57x faster than its weighted layers alone, shufflenet 0.93x)."""
    from epoxy.quantization.qdq import CHAIN_OP_TYPES, DEFAULT_OP_TYPES, default_op_types

    out: list[Candidate] = []
    if has_calibration:
        out.append(Candidate("static per-channel", "static", replace(base, per_channel=True)))
        out.append(Candidate("static per-tensor", "static", replace(base, per_channel=False)))
        if base.op_types is None:
            chain = set(default_op_types(providers)) >= set(CHAIN_OP_TYPES)
            label, ops = (("weighted layers only", DEFAULT_OP_TYPES) if chain else ("whole int8 chain", CHAIN_OP_TYPES))
            twin = replace(base, per_channel=True, op_types=ops)
            out.append(Candidate(f"static per-channel, {label}", "static", twin))
    if "dynamic" in available:
        out.append(Candidate("dynamic", "dynamic", base))
    out += [Candidate(mode, mode, base) for mode in float_candidates(providers, features) if mode in available]
    return out


@dataclass(frozen=True)
class Measured:
    """A candidate's outcome: an error (it failed to quantize or check) or its numbers."""

    label: str
    rel_error: float | None
    ms: float | None
    error: str | None = None
    changed: bool = True  # False: it quantized no compute node (dynamic on a CNN): never a winner


FP32_LABEL = "fp32 (unchanged)"
#: a winner must beat fp32 by this factor: a tie within timing noise keeps the float model
MIN_GAIN = 0.95


def choose(measured: list[Measured], fp32_ms: float, max_rel_error: float) -> tuple[str | None, list[AutoTrial]]:
    """The winning label (None: keep fp32) and the table, each row with its verdict."""
    fits = [m for m in measured if m.error is None and m.changed and m.rel_error is not None and m.ms is not None
            and m.rel_error <= max_rel_error and m.ms <= fp32_ms * MIN_GAIN]
    winner = min(fits, key=lambda m: m.ms or 0.0) if fits else None
    rows = []
    for m in measured:
        if m.error is not None:
            verdict = f"failed: {m.error}"
        elif not m.changed:
            verdict = "rejected: quantizes no compute node of this model"
        elif m is winner:
            verdict = (f"chosen: fastest within the {max_rel_error:.1%} budget "
                       f"({fp32_ms / (m.ms or fp32_ms):.2f}x fp32)")
        elif m.rel_error is None or m.rel_error > max_rel_error:
            verdict = f"rejected: error over the {max_rel_error:.1%} budget"
        elif m.ms is not None and m.ms > fp32_ms * MIN_GAIN:
            verdict = (f"rejected: not faster than fp32 beyond noise ({m.ms:.3f} vs {fp32_ms:.3f} ms; "
                       f"needs <= {MIN_GAIN:.2f}x)")
        else:
            verdict = "within budget, but slower than the chosen one"
        rows.append(AutoTrial(m.label, m.rel_error, m.ms, verdict))
    rows.append(AutoTrial(FP32_LABEL, 0.0, fp32_ms,
                          "kept: no candidate was within budget and not slower" if winner is None else "baseline"))
    return (winner.label if winner else None), rows


def _recheck(rows: list[AutoTrial], winner: str, winner_verdict: str, fp32_verdict: str) -> list[AutoTrial]:
    out = []
    for row in rows:
        if row.scheme == winner:
            row = replace(row, verdict=winner_verdict)
        elif row.scheme == FP32_LABEL:
            row = replace(row, verdict=fp32_verdict)
        out.append(row)
    return out


def confirmed(rows: list[AutoTrial], winner: str, fp32_ms: float, winner_ms: float) -> list[AutoTrial]:
    """The table after the winner beat fp32 again, timed in alternation with it."""
    row = next(r for r in rows if r.scheme == winner)
    return _recheck(rows, winner, f"{row.verdict}; confirmed interleaved with fp32: {winner_ms:.3f} vs "
                    f"{fp32_ms:.3f} ms", "baseline")


def unconfirmed(rows: list[AutoTrial], winner: str, fp32_ms: float, winner_ms: float) -> list[AutoTrial]:
    """The table after the winner lost its lead when timed in alternation with fp32."""
    return _recheck(rows, winner, f"rejected: timed in alternation with fp32 it was not faster beyond noise "
                    f"({winner_ms:.3f} vs {fp32_ms:.3f} ms)", "kept: the best candidate did not beat it when "
                    "timed in alternation")
