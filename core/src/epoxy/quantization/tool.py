"""``quantize_model``: the orchestration behind ``epoxy quantize``.

Calibration data is read once and split: the last batches are held out for the report, the
rest are histogrammed once (every candidate of ``--mode auto`` reads the same statistics).
The chosen scheme rewrites the model, :mod:`~epoxy.quantization.checks` proves it loads and
runs (onnx checker, epoxy, onnxruntime) and the report measures it against the float model on
the held-out batches. Nothing here writes files: a model that comes back has passed the checks.
"""

from __future__ import annotations

import re
import statistics
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper

from epoxy.errors import EpoxyError, InvalidArgumentError
from epoxy.quantization import auto, checks, schemes
from epoxy.quantization.collect import collect
from epoxy.quantization.errors import CalibrationDataError
from epoxy.quantization.feeds import Feed, folder_feeds, iter_feeds
from epoxy.quantization.preprocess import preprocess
from epoxy.quantization.qdq import QuantizationError
from epoxy.quantization.report import Latency, OutputAccuracy, QuantizationReport, accuracy, count_nodes
from epoxy.quantization.stats import CalibrationStats

Progress = Callable[[int, int], None]
"""Called after each calibration batch with (batches done, batches in all)."""

_INDEXED = re.compile(r"^(?P<input>.+)_(?P<k>\d+)$")
_SPLIT_INTO = 10  # a one-batch .npz is cut along axis 0 into this many batches, so some can be held out


class CalibrationRequiredError(CalibrationDataError):
    """A mode that needs calibration data was asked for without any."""


# -- calibration data -------------------------------------------------------------------------

def _inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    inits = {i.name for i in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in inits]


def _npz_file(path: Path, names: Sequence[str]) -> list[Feed]:
    """One .npz: arrays named ``<input>_<k>`` are batch k; arrays named ``<input>`` are cut
    along axis 0 into up to 10 batches (so the last can be held out)."""
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {k: archive[k] for k in archive.files}
    except (OSError, ValueError, EOFError) as exc:
        raise CalibrationDataError(f"{path}: cannot read it as .npz: {exc}", source=str(path)) from exc
    if set(arrays) <= set(names):
        rows = {len(a) if np.ndim(a) else 1 for a in arrays.values()}
        if len(rows) != 1:
            raise CalibrationDataError(f"{path}: the inputs have different first dimensions {sorted(rows)}; "
                                       "name them <input>_<k> to give batches explicitly", source=str(path))
        n = rows.pop()
        parts = min(n, _SPLIT_INTO)
        return [{k: np.array_split(a, parts)[b] for k, a in arrays.items()} for b in range(parts)]
    batches: dict[int, Feed] = {}
    for key, array in arrays.items():
        match = _INDEXED.match(key)
        if not match or match["input"] not in names:
            raise CalibrationDataError(f"{path}: array {key!r} names no model input (expected <input> or "
                                       f"<input>_<k>; inputs: {', '.join(names)})", source=str(path))
        batches.setdefault(int(match["k"]), {})[match["input"]] = array
    return [batches[k] for k in sorted(batches)]


def read_calibration(model: onnx.ModelProto, source: Any) -> list[Feed]:
    """Every batch of ``source`` (a folder, one .npz file, a data reader or an iterable)."""
    names = [i.name for i in _inputs(model)]
    if isinstance(source, (str, Path)):
        path = Path(source)
        if path.is_file() and path.suffix == ".npz":
            return _npz_file(path, names)
        if not path.exists():
            raise CalibrationDataError(f"calibration data {str(path)!r} does not exist", source=str(path))
        return list(folder_feeds(path, names))
    return list(iter_feeds(source, names))


def random_feeds(model: onnx.ModelProto, batches: int, seed: int = 0) -> list[Feed]:
    """Seeded random inputs shaped like the model's (unknown dims are 1): standard normal
    floats; integers 0 or 1, the values every integer input of an exported model accepts
    (token ids and type ids index tables of at least two rows, masks are 0/1)."""
    rng = np.random.default_rng(seed)
    out: list[Feed] = []
    for _ in range(batches):
        feed: Feed = {}
        for vi in _inputs(model):
            t = vi.type.tensor_type
            shape = [d.dim_value if d.HasField("dim_value") else 1 for d in t.shape.dim]
            dtype = helper.tensor_dtype_to_np_dtype(t.elem_type)
            if dtype.kind == "f":
                feed[vi.name] = rng.standard_normal(shape).astype(dtype)
            elif dtype.kind == "b":
                feed[vi.name] = rng.random(shape) < 0.5
            else:
                feed[vi.name] = rng.integers(0, 2, shape).astype(dtype)
        out.append(feed)
    return out


def split_held_out(batches: list[Feed], held_out: int | None) -> tuple[list[Feed], list[Feed], list[str]]:
    """(calibration, held-out, warnings): the last ``held_out`` batches (default 20%, at least 1)."""
    n = len(batches)
    if n == 0:
        raise CalibrationDataError("no calibration batches: the data source yielded nothing")
    if n == 1:
        return batches, batches, ["one calibration batch only: the report's accuracy is measured on the data "
                                  "the model was calibrated on (give more batches to hold some out)"]
    k = max(1, round(0.2 * n)) if held_out is None else held_out
    if not 1 <= k < n:
        raise InvalidArgumentError(f"--held-out {k}: must be at least 1 and leave a calibration batch "
                                   f"({n} batches in all)")
    return batches[:n - k], batches[n - k:], []


# -- measuring ---------------------------------------------------------------------------------

def _session(model: onnx.ModelProto, providers: Sequence[str]) -> Any:
    from epoxy.session import InferenceSession

    return InferenceSession(model, providers=list(providers))


_TIMING_BUDGET_S = 0.2  # per model: sub-millisecond models get more runs than `runs`, up to 200
_MAX_RUNS = 200


def _median_ms(session: Any, feed: Feed, runs: int) -> float:
    """Median of at least ``runs`` timed runs after a warm-up; fast models run more often,
    within a small time budget, so ``--mode auto`` does not choose on noise."""
    session.run(None, dict(feed))  # first run: lazy compilation and allocation, not timed
    times: list[float] = []
    spent = 0.0
    while len(times) < max(1, runs) or (spent < _TIMING_BUDGET_S and len(times) < _MAX_RUNS):
        start = time.perf_counter()
        session.run(None, dict(feed))
        times.append((time.perf_counter() - start) * 1e3)
        spent += times[-1] / 1e3
    return statistics.median(times)


@dataclass
class _Baseline:
    """The float model's outputs on the held-out batches and its latency."""

    names: list[str]
    outputs: list[list[np.ndarray]]  # per batch
    ms: float
    session: Any = None  # kept for auto's confirmation run against the winner


def _baseline(model: onnx.ModelProto, held: list[Feed], providers: Sequence[str], runs: int) -> _Baseline:
    session = _session(model, providers)
    names = [o.name for o in model.graph.output]
    outputs = [[np.asarray(v) for v in session.run(None, dict(f))] for f in held]
    return _Baseline(names, outputs, _median_ms(session, held[0], runs), session)


@dataclass
class _Trial:
    """One scheme applied, checked and measured."""

    model: onnx.ModelProto
    notes: list[str]
    checks: list[str]
    accuracy: list[OutputAccuracy]
    ms: float
    partition: dict[str, int]

    @property
    def changed(self) -> bool:
        """Whether the scheme quantized any compute node (dynamic on a CNN quantizes none)."""
        counts = count_nodes(self.model)
        return bool(counts.int8 or counts.int8_weights or counts.low_float)

    @property
    def rel_error(self) -> float:
        return max((a.rel_error for a in self.accuracy), default=0.0)


def _trial(model: onnx.ModelProto, mode: str, options: schemes.SchemeOptions, stats: CalibrationStats | None,
           held: list[Feed], base: _Baseline, runs: int) -> _Trial:
    scheme = schemes.get(mode)
    try:
        quantized, notes = scheme.run(model, stats, options)
    except QuantizationError:
        raise
    except (ValueError, TypeError) as exc:  # the quantizers' argument errors: user input
        raise QuantizationError(f"{mode}: {exc}") from exc
    passed = checks.check_all(quantized, held[0], options.providers)
    session = _session(quantized, options.providers)
    got = [[np.asarray(v) for v in session.run(None, dict(f))] for f in held]
    acc = [accuracy(name, [b[i] for b in base.outputs], [g[i] for g in got]) for i, name in enumerate(base.names)]
    return _Trial(quantized, notes, passed, acc, _median_ms(session, held[0], runs),
                  session.partition_report().summary())


# -- the tool ----------------------------------------------------------------------------------

def _load(model: onnx.ModelProto | str | Path | bytes) -> onnx.ModelProto:
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, bytes):
        return onnx.load_from_string(model)
    path = Path(model)
    if not path.is_file():
        raise InvalidArgumentError(f"model {str(path)!r} does not exist")
    return onnx.load(str(path))


#: the modes that write integer ops in either format (the others write float or weight-only models)
FORMAT_MODES = ("static", "dynamic", "auto")


def _options(providers: tuple[str, ...], *, method: str, per_channel: bool | None, activation_dtype: str | None,
             weight_dtype: str | None, reduce_range: bool | None, op_types: Sequence[str] | None,
             nodes_to_exclude: Sequence[str], format: str | None = None, mode: str = "static"
             ) -> tuple[schemes.SchemeOptions, schemes.TargetDefaults]:
    """The scheme options: the target's defaults with the caller's overrides. The target's
    reduce_range (7-bit weights for u8s8 kernels without VNNI) is not applied to a weight-only
    model (dynamic mode's qdq format), which has no integer kernel to protect."""
    d = schemes.target_defaults(providers, schemes.cpu_features())
    weight_only = mode == "dynamic" and format == "qdq"
    return schemes.SchemeOptions(
        method=method, per_channel=d.per_channel if per_channel is None else per_channel,
        activation_dtype=activation_dtype or d.activation_dtype, weight_dtype=weight_dtype or d.weight_dtype,
        reduce_range=(d.reduce_range and not weight_only) if reduce_range is None else reduce_range,
        op_types=tuple(op_types) if op_types else None, nodes_to_exclude=tuple(nodes_to_exclude),
        providers=providers, format=format), d


def _scheme_line(mode: str, o: schemes.SchemeOptions, d: schemes.TargetDefaults, why: str) -> str:
    """One line on the precision used and why: the target's reason, or ``why`` it differs."""
    if mode != "static":
        return f"{mode}: {schemes.get(mode).help}"
    used = replace(d, activation_dtype=o.activation_dtype, weight_dtype=o.weight_dtype,
                   per_channel=o.per_channel, reduce_range=o.reduce_range)
    if used == d:
        return d.line()
    return replace(used, why=f"{why} (target default: {d.line()})").line()


def quantize_model(model: onnx.ModelProto | str | Path | bytes, *, mode: str = "static", calibration: Any = None,
                   random_calibration: int | None = None, method: str = "minmax", per_channel: bool | None = None,
                   activation_dtype: str | None = None, weight_dtype: str | None = None,
                   reduce_range: bool | None = None, providers: Iterable[str] = ("cpu",),
                   op_types: Sequence[str] | None = None, nodes_to_exclude: Sequence[str] = (),
                   held_out: int | None = None, max_rel_error: float = 0.02, latency_runs: int = 5,
                   progress: Progress | None = None, seed: int = 0,
                   format: str | None = None) -> tuple[onnx.ModelProto, QuantizationReport]:
    """Quantize ``model`` with ``mode`` (a key of :data:`schemes.SCHEMES`, or ``"auto"``) and
    return the checked model and its :class:`QuantizationReport`.

    ``calibration``: a folder of .npz/.npy feeds, one .npz file, a data reader or an
    iterable of feed dicts; the last ``held_out`` batches (default 20%, at least 1) measure
    the report's accuracy. ``format`` (static and dynamic modes): ``"qdq"`` (QuantizeLinear/
    DequantizeLinear pairs, what every runtime reads; static's default) or ``"qoperator"``
    (QLinearConv/QLinearMatMul, MatMulInteger... ops; dynamic's default).
    ``random_calibration=N`` draws N seeded random batches instead
    (the accuracy then means little, and the report warns). Precision defaults come from the
    first provider and this CPU (:func:`schemes.target_defaults`); the keyword arguments
    override them. Raises :class:`CalibrationRequiredError` for a calibrated mode without
    data, :class:`checks.QuantizedModelCheckError` naming the node when a check fails.
    """
    if format is not None and mode not in FORMAT_MODES:
        raise InvalidArgumentError(f"format={format!r} applies to the {' and '.join(FORMAT_MODES)} modes, "
                                   f"not {mode!r}")
    source = _load(model)
    size_before = source.ByteSize()
    proto, simplified = preprocess(source)  # always: BN folded into Conv, weight plumbing folded
    providers = tuple(providers) or ("cpu",)
    options, defaults = _options(providers, method=method, per_channel=per_channel,
                             activation_dtype=activation_dtype, weight_dtype=weight_dtype,
                             reduce_range=reduce_range, op_types=op_types, nodes_to_exclude=nodes_to_exclude,
                             format=format, mode=mode)
    available = set(schemes.available())
    features = schemes.cpu_features()
    if mode == "auto":
        needs = calibration is not None or random_calibration is not None
    else:
        needs = schemes.get(mode).needs_calibration
    found: list[str] = []
    if calibration is not None:
        batches = read_calibration(proto, calibration)
    elif random_calibration is not None:
        if random_calibration < 1:
            raise InvalidArgumentError("--random-calibration N needs N >= 1")
        batches = random_feeds(proto, random_calibration, seed)
        found.append(f"calibrated on {random_calibration} random batches (seed {seed}): the accuracy numbers "
                     "say little about real inputs")
    elif needs:
        raise CalibrationRequiredError(
            f"--mode {mode} needs calibration data: pass --calibration DIR_OR_NPZ (a folder of .npz files, one "
            "feed dict each, or <input>_<k>.npy files; or one .npz file), or --random-calibration N for a smoke "
            "test whose accuracy means little")
    else:
        batches = random_feeds(proto, 2, seed)
        found.append("no --calibration data: accuracy measured on random inputs, which says little")
    if needs:
        calib, held, split_notes = split_held_out(batches, held_out)
        found += split_notes
    else:  # nothing to calibrate: every batch measures accuracy
        calib, held = [], batches

    stats = None
    if needs:
        total = len(calib)
        stats = collect(proto, calib, providers=providers,
                        progress=None if progress is None else (lambda n: progress(n, total)))
    try:
        base = _baseline(proto, held, providers, latency_runs)
    except EpoxyError as exc:
        if calibration is not None:
            raise
        # made-up inputs: their symbolic dims are guesses (1), and some models tie one input's
        # length to another's (a decoder's mask spans past + new tokens)
        raise CalibrationRequiredError(
            f"the float model does not run on random inputs made from its declared input shapes ({exc}); "
            "pass --calibration with real inputs (a folder of .npz feed dicts, or one .npz file)") from exc

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if mode == "auto":
            chosen_mode, used, trial, table = _auto(proto, options, stats, held, base, latency_runs,
                                                    max_rel_error, features, available, providers)
            why = "chosen by --mode auto"
        else:
            chosen_mode, used, why = mode, options, "set by flags"
            trial, table = _trial(proto, mode, options, stats, held, base, latency_runs), []

    if trial is None:  # auto kept the float model: the user's model as given, checked and reported
        out, simplified = source, []
        passed = checks.check_all(out, held[0], providers)
        acc = [accuracy(n, [b[i] for b in base.outputs], [b[i] for b in base.outputs])
               for i, n in enumerate(base.names)]
        ms, partition, notes = base.ms, _session(out, providers).partition_report().summary(), []
    else:
        out, passed, acc, ms, partition, notes = (trial.model, trial.checks, trial.accuracy, trial.ms,
                                                  trial.partition, trial.notes)
    counts = count_nodes(out)
    if trial is not None and not (counts.int8 or counts.int8_weights or counts.low_float):
        found.append(f"--mode {chosen_mode} changed no compute node: the model has none it quantizes (dynamic and "
                     "weight-only modes take MatMul/Gemm with constant weights); the written model computes as "
                     "the input did")
    report = QuantizationReport(
        mode=mode if mode != "auto" else f"auto -> {chosen_mode or 'fp32'}",
        scheme=("fp32 kept: no quantized candidate was within budget and not slower" if chosen_mode is None
                else _scheme_line(chosen_mode, used, defaults, why)),
        providers=providers, size_before=size_before, size_after=out.ByteSize(),
        calibration_batches=len(calib) if needs else 0, held_out_batches=len(held), accuracy=acc,
        latency=Latency(base.ms, ms, latency_runs, providers), nodes=counts,
        partition={",".join(providers): partition}, checks=passed,
        notes=([f"pre-processed ({', '.join(simplified)})"] if simplified else []) + list(notes),
        warnings=found + [str(w.message) for w in caught], auto=table)
    return out, report


def _auto(model: onnx.ModelProto, options: schemes.SchemeOptions, stats: CalibrationStats | None,
          held: list[Feed], base: _Baseline, runs: int, max_rel_error: float, features: frozenset[str],
          available: set[str], providers: tuple[str, ...]) -> tuple[
              str | None, schemes.SchemeOptions, _Trial | None, list[Any]]:
    """(mode, its options, its trial, the table); mode and trial None when fp32 is kept."""
    tried = auto.candidates(options, providers, features, available, stats is not None)
    measured: list[auto.Measured] = []
    trials: dict[str, tuple[auto.Candidate, _Trial]] = {}
    for cand in tried:
        try:
            t = _trial(model, cand.mode, cand.options, stats, held, base, runs)
        except QuantizationError as exc:  # one failing candidate does not end the search
            measured.append(auto.Measured(cand.label, None, None, str(exc).splitlines()[0]))
            continue
        trials[cand.label] = (cand, t)
        measured.append(auto.Measured(cand.label, t.rel_error, t.ms, changed=t.changed))
    winner, table = auto.choose(measured, base.ms, max_rel_error)
    if winner is None:
        return None, options, None, table
    cand, trial = trials[winner]
    fp32_ms, winner_ms = _interleaved_ms([base.session, _session(trial.model, providers)], held[0], runs)
    if winner_ms > fp32_ms * auto.MIN_GAIN:  # the sequential timing was luck (or load): keep fp32
        return None, options, None, auto.unconfirmed(table, winner, fp32_ms, winner_ms)
    base.ms, trial.ms = fp32_ms, winner_ms  # the report shows the like-for-like pair
    return cand.mode, cand.options, trial, auto.confirmed(table, winner, fp32_ms, winner_ms)


def _interleaved_ms(sessions: list[Any], feed: Feed, runs: int, rounds: int = 5) -> list[float]:
    """Medians of the sessions timed in alternating blocks: a load change during the timing
    hits both alike, unlike the one-after-the-other timing of the candidates."""
    times: list[list[float]] = [[] for _ in sessions]
    for _ in range(rounds):
        for k, session in enumerate(sessions):
            session.run(None, dict(feed))  # the block's first run absorbs the switch
            for _ in range(max(1, runs)):
                start = time.perf_counter()
                session.run(None, dict(feed))
                times[k].append((time.perf_counter() - start) * 1e3)
    return [statistics.median(t) for t in times]
