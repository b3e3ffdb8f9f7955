"""``max_performance``: measure the provider sets that can run this model, keep the fastest
whose outputs match the cpu provider's, and cache the decision.

Candidates: cpu alone (the reference), then each other (provider, device) pair in front of
cpu, then the two providers claiming the most nodes together when each claims nodes the other
does not. A candidate whose provider claims no node of the model is pruned (it would be cpu
alone again). The candidates run in alternation on the same seeded inputs (a noisy machine
slows them all alike) until the time budget is spent; the one with the lowest median wins
if its outputs are within the tolerance of cpu's.
"""

from __future__ import annotations

import copy
import statistics
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import InvalidArgumentError
from ..plugins import ProviderRegistry
from . import tune_cache
from .inventory import EpDevice
from .selection import ProviderSelection

#: the provider every candidate falls back to, and whose outputs are the reference
REFERENCE = "cpu"
#: outputs match when max |a - b| <= TOLERANCE * max(1, max |reference|)
TOLERANCE = 1e-3
#: share of the budget session creation may take before the remaining candidates are dropped
CREATE_SHARE = 0.6
MIN_ROUNDS, MAX_ROUNDS = 1, 60
#: timed calls per candidate and round, after one untimed call (see :func:`_time`)
BLOCK = 3
#: rounds after which timing stops as soon as the winner is clear (:func:`_settled`)
SETTLED_ROUNDS = 5
#: integer inputs are drawn from [0, INT_HIGH): 0 and 1 are valid token ids, token types,
#: mask values and indexes into any table of two rows or more (bert's token_type_ids index a
#: 2-row embedding: [0, 4) made the cpu reference fail)
INT_HIGH = 2
#: ``progress(step, done, total)``: what the CLI's progress bar shows
Progress = Callable[[str, int, int], None]
#: ``InferenceSession`` (given by the caller: the session module imports this one)
OpenSession = Callable[..., Any]


class TuningError(InvalidArgumentError):
    """The model cannot be measured (the cpu reference cannot run it on the tuning inputs):
    ``epoxy tune`` reports it; a session falls back to the default policy with a warning."""


@dataclass
class Candidate:
    """One provider set: its session, what it claimed, its timings, or why it was dropped."""

    devices: list[EpDevice]
    session: Any = None
    claimed: dict[str, int] = field(default_factory=dict)
    nodes: dict[str, set[str]] = field(default_factory=dict)
    create_s: float = 0.0
    samples: list[float] = field(default_factory=list)
    max_error: float | None = None
    dropped: str | None = None

    @property
    def label(self) -> str:
        return " > ".join(ep.label for ep in self.devices)

    @property
    def median_ms(self) -> float | None:
        return statistics.median(self.samples) * 1e3 if self.samples else None

    def row(self, reference_ms: float | None) -> dict[str, Any]:
        median = self.median_ms
        return {"providers": [ep.ep_name for ep in self.devices], "devices": [ep.device.label for ep in self.devices],
                "label": self.label, "claimed": dict(self.claimed), "create_s": round(self.create_s, 3),
                "median_ms": None if median is None else round(median, 4), "runs": len(self.samples),
                "vs_cpu": None if median is None or not reference_ms else round(reference_ms / median, 3),
                "max_error": self.max_error, "dropped": self.dropped}


def tuned_selection(source: Any, options: Any, registry: ProviderRegistry, ep_devices: Sequence[EpDevice],
                    open_session: OpenSession, *, dims: Mapping[str, int] | None = None, refresh: bool = False,
                    progress: Progress | None = None,
                    inputs: Mapping[str, np.ndarray] | None = None) -> ProviderSelection:
    """The cached decision for this model, shapes, machine and providers, else a fresh
    measurement (``refresh``: always measure), stored for next time. ``inputs``: values to
    measure with (``epoxy tune --inputs``); inputs not given are seeded random values."""
    from ..debug.feeds import random_feeds

    proto = _model_proto(source)
    feeds = {**random_feeds(proto, seed=0, dims=dims, int_high=INT_HIGH), **dict(inputs or {})}
    key = tune_cache.TuneKey(tune_cache.model_digest(source, proto), {k: tuple(v.shape) for k, v in feeds.items()})
    notes: list[str] = []
    if not refresh:
        cached, why = tune_cache.read(key, ep_devices)
        if why:
            notes.append(why)
        if cached is not None:
            chosen = _from_cache(cached.chosen, ep_devices)
            if chosen is not None:
                return ProviderSelection("max_performance", chosen,
                                         [f"from the tuning cache {cached.path} (measured {cached.created})"],
                                         source="cache", table=cached.table, cache_path=str(cached.path))
            notes.append(f"tuning cache entry {cached.path} ignored: stale (it names a device not found now)")
    selection = measure(source, options, registry, ep_devices, feeds, open_session, budget_s=options.tune_budget_s,
                        progress=progress)
    selection.notes[:0] = notes
    try:
        selection.cache_path = str(tune_cache.write(key, ep_devices, selection.chosen, selection.table))
    except OSError as exc:  # a read-only home must not fail the session: it only costs a re-measure
        selection.notes.append(f"the decision was not cached: {type(exc).__name__}: {exc}")
    return selection


def measure(source: Any, options: Any, registry: ProviderRegistry, ep_devices: Sequence[EpDevice],
            feeds: Mapping[str, np.ndarray], open_session: OpenSession, *, budget_s: float,
            progress: Progress | None = None, tolerance: float = TOLERANCE) -> ProviderSelection:
    """Measure the candidate provider sets (module doc) within ``budget_s`` seconds."""
    start = time.perf_counter()
    reference_ep = next((ep for ep in ep_devices if ep.ep_name == REFERENCE and ep.device_index == 0), None)
    if reference_ep is None:
        raise InvalidArgumentError("max_performance compares every candidate with the cpu provider, which is not "
                                   "installed (pip install ./plugins/ep-cpu)")
    others = [ep for ep in ep_devices if ep.ep_name != REFERENCE]
    candidates = [Candidate([reference_ep])] + [Candidate([ep, reference_ep]) for ep in others]
    report = progress or (lambda step, done, total: None)
    total = len(candidates) + 2
    for done, candidate in enumerate(candidates):
        report(f"creating {candidate.label}", done, total)
        if time.perf_counter() - start > CREATE_SHARE * budget_s:
            candidate.dropped = "not measured: the tuning budget was spent creating sessions"
            continue
        _create(candidate, source, options, registry, open_session)
    reference = candidates[0]
    if reference.session is None:
        raise TuningError(f"max_performance: the cpu provider cannot run this model: {reference.dropped}")
    pair = _pair(candidates)
    if pair is not None and time.perf_counter() - start <= CREATE_SHARE * budget_s:
        report(f"creating {pair.label}", len(candidates), total)
        _create(pair, source, options, registry, open_session)
        candidates.append(pair)
    report("checking outputs", len(candidates), total)
    expected = _check_outputs(candidates, dict(feeds), tolerance)
    if expected is None:
        raise TuningError(f"max_performance: the cpu provider failed on the tuning inputs ({reference.dropped}); "
                          "give representative inputs: epoxy tune MODEL --inputs name=file.npy")
    report("timing", len(candidates) + 1, total)
    rounds = _time(candidates, dict(feeds), start, budget_s)
    live = [c for c in candidates if c.dropped is None and c.samples]
    winner = min(live, key=lambda c: statistics.median(c.samples))
    reference_ms = reference.median_ms
    elapsed = time.perf_counter() - start
    notes = [f"measured {len(live)} of {len(candidates)} candidate provider sets in {elapsed:.1f} s "
             f"({rounds} alternating rounds of {BLOCK} timed calls each, budget {budget_s:g} s)"]
    if winner is not reference and reference_ms and winner.median_ms:
        notes.append(f"{winner.label}: {winner.median_ms:.3f} ms, {reference_ms / winner.median_ms:.2f}x cpu alone "
                     f"({reference_ms:.3f} ms)")
    notes.extend(f"{c.label}: {c.dropped}" for c in candidates if c.dropped)
    table = [c.row(reference_ms) for c in candidates]
    for candidate in candidates:  # sessions hold compiled models: keep only the winner's, for adoption
        if candidate is not winner:
            candidate.session = None
    report("done", total, total)
    return ProviderSelection("max_performance", list(winner.devices), notes, source="measured", table=table,
                             session=winner.session)


def _create(candidate: Candidate, source: Any, options: Any, registry: ProviderRegistry,
            open_session: OpenSession) -> None:
    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            candidate.session = open_session(
                source, candidate_options(options), registry=registry,
                providers=[(ep.ep_name, {"device_index": ep.device_index}) for ep in candidate.devices])
    except Exception as exc:  # a provider that cannot take this model is a row, not a failed tuning
        candidate.dropped = f"session creation failed: {type(exc).__name__}: {exc}"
        return
    finally:
        candidate.create_s = time.perf_counter() - t0
    skipped = [str(w.message) for w in caught if "skipped" in str(w.message)]
    report = candidate.session.partition_report()
    for decision in report.nodes:
        candidate.nodes.setdefault(decision.provider, set()).add(decision.node)
    candidate.claimed = {name: len(nodes) for name, nodes in candidate.nodes.items()}
    first = candidate.devices[0].ep_name
    if first != REFERENCE and not candidate.claimed.get(first):
        why = f" ({skipped[0]})" if skipped else ""
        candidate.dropped = f"pruned: {first} claims no node of this model{why}"
        candidate.session = None


def candidate_options(options: Any) -> Any:
    """The session options for a candidate: the user's, less the policy and the side effects
    (profiling files, an optimized-model or compiled-model file)."""
    from ..options import SessionOptions

    out = copy.deepcopy(options) if options is not None else SessionOptions()
    out.provider_selection_policy = None
    object.__setattr__(out, "_policy_delegate", None)
    object.__setattr__(out, "_providers", [])
    out.enable_profiling = False
    out.optimized_model_filepath = ""
    out.context_enable = False
    return out


def _pair(candidates: Sequence[Candidate]) -> Candidate | None:
    """The two providers claiming the most nodes together, when each claims nodes the other
    does not (together they may run more of the model than either)."""
    singles = [c for c in candidates[1:] if c.session is not None]
    singles.sort(key=lambda c: -c.claimed.get(c.devices[0].ep_name, 0))
    for i, first in enumerate(singles):
        mine = first.nodes.get(first.devices[0].ep_name, set())
        for second in singles[i + 1:]:
            if second.devices[0].ep_name == first.devices[0].ep_name:
                continue
            theirs = second.nodes.get(second.devices[0].ep_name, set())
            if theirs - mine and mine - theirs:
                return Candidate([first.devices[0], second.devices[0], candidates[0].devices[0]])
    return None


def _check_outputs(candidates: Sequence[Candidate], feeds: dict[str, np.ndarray],
                   tolerance: float) -> list[Any] | None:
    """Run each candidate once (also its warm-up); drop those whose outputs differ from cpu's."""
    expected: list[Any] | None = None
    for candidate in candidates:
        if candidate.session is None:
            continue
        try:
            outputs = candidate.session.run(None, feeds)
        except Exception as exc:
            candidate.dropped = f"run failed: {type(exc).__name__}: {exc}"
            candidate.session = None
            if candidate is candidates[0]:
                return None
            continue
        if candidate is candidates[0]:  # the cpu reference comes first
            expected = outputs
            candidate.max_error = 0.0
            continue
        if expected is None:  # the reference failed: nothing to compare with
            return None
        error = _max_error(expected, outputs)
        candidate.max_error = error
        if error is None or error > tolerance:
            shown = "not comparable" if error is None else f"{error:.2e}"
            candidate.dropped = f"outputs differ from cpu's (error {shown} > tolerance {tolerance:g})"
            candidate.session = None
    return expected


def _max_error(expected: Sequence[Any], got: Sequence[Any]) -> float | None:
    """Largest error over the outputs, scaled by max(1, |expected|); None when shapes or kinds differ."""
    worst = 0.0
    for want, have in zip(expected, got):
        want, have = np.asarray(want), np.asarray(have)
        if want.shape != have.shape:
            return None
        if want.dtype.kind in "fc":
            if want.size:
                scale = max(1.0, float(np.nanmax(np.abs(want))) if np.isfinite(want).any() else 1.0)
                diff = np.abs(want.astype(np.float64) - have.astype(np.float64))
                if np.isnan(diff).any() and not np.array_equal(np.isnan(want), np.isnan(have)):
                    return None
                worst = max(worst, float(np.nanmax(diff)) / scale if diff.size else 0.0)
        elif not np.array_equal(want, have):
            return None
    return worst


def _time(candidates: Sequence[Candidate], feeds: dict[str, np.ndarray], start: float, budget_s: float) -> int:
    """Alternate the live candidates in blocks (one untimed call, then BLOCK timed ones) while
    another round fits in the budget (at least MIN_ROUNDS rounds) and the winner is unclear.
    The untimed call absorbs what the previous candidate left running: the cpu provider's BLAS
    threads spin on after its call and, on a 2-core machine, doubled OpenVINO's next call
    (zfnet512: 74 ms after cpu, 40 ms after itself)."""
    live = [c for c in candidates if c.session is not None]
    rounds = 0
    while rounds < MAX_ROUNDS:
        round_start = time.perf_counter()
        for candidate in live[rounds % len(live):] + live[:rounds % len(live)]:
            candidate.session.run(None, feeds)
            for _ in range(BLOCK):
                t0 = time.perf_counter()
                candidate.session.run(None, feeds)
                candidate.samples.append(time.perf_counter() - t0)
        rounds += 1
        spent = time.perf_counter() - start
        last_round = time.perf_counter() - round_start
        if spent + last_round > budget_s and rounds >= MIN_ROUNDS:  # another round would overrun
            break
        if spent >= 2 * budget_s:
            break
        if rounds >= SETTLED_ROUNDS and _settled(live):
            break
    return rounds


def _settled(live: Sequence[Candidate]) -> bool:
    """True when the fastest candidate's slow quarter is faster than every other one's fast
    quarter: more rounds would not change the winner."""
    if len(live) < 2:
        return True
    quartiles = {id(c): statistics.quantiles(c.samples, n=4) for c in live}
    best = min(live, key=lambda c: quartiles[id(c)][1])  # the median
    return all(quartiles[id(best)][2] < quartiles[id(c)][0] for c in live if c is not best)


def _from_cache(chosen: Sequence[tuple[str, int]], ep_devices: Sequence[EpDevice]) -> list[EpDevice] | None:
    by_key = {(ep.ep_name, ep.device_index): ep for ep in ep_devices}
    found = [by_key.get(pair) for pair in chosen]
    return None if any(ep is None for ep in found) else [ep for ep in found if ep is not None]


def _model_proto(source: Any) -> Any:
    """The model's ONNX proto for its declared inputs (external data not loaded)."""
    import onnx

    if isinstance(source, onnx.ModelProto):
        return source
    if isinstance(source, (bytes, bytearray, memoryview)):
        return onnx.load_model_from_string(bytes(source))
    return onnx.load_model(str(source), load_external_data=False)
