"""``validate``: run a model on the providers under test and on a reference, compare every
value both computed, and name the first node whose output diverges.

The first divergence is the first compared value, in the order the providers under test
produced them (a topological order), that fails the tolerance: every value before it
matched, so the error starts at that node. The drift is what became of the error after it:
the compared values computed from the diverging one, the model outputs among them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import InvalidArgumentError
from .capture import Capture, Producer
from .compare import DEFAULT_ATOL, DEFAULT_RTOL, Stats, compare, worst
from .feeds import Feeds, check_names, random_feeds
from .model_io import downstream, load_proto
from .references import reference_runner, session_capture


@dataclass(frozen=True)
class ValueDiff:
    """One compared value: where it was computed and how far it is from the reference."""

    name: str
    node: str
    op_type: str
    provider: str
    group: str | None
    shape: list[int]
    is_output: bool
    stats: Stats

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "node": self.node, "op_type": self.op_type, "provider": self.provider,
                "group": self.group, "shape": self.shape, "is_output": self.is_output, **self.stats.to_dict()}


@dataclass
class ValidationReport:
    """The comparison of one model on ``providers`` against ``reference``."""

    model: str
    providers: list[str]
    reference: str
    rtol: float
    atol: float
    runs: int
    values: list[ValueDiff] = field(default_factory=list)
    first: ValueDiff | None = None
    drift: list[ValueDiff] = field(default_factory=list)
    #: values only one side computed (fused away, inside a compiled group, or renamed)
    not_compared: int = 0
    #: an exception of the run under test or of the reference, as "where: Type: message"
    error: str | None = None
    #: the feeds of the run that diverged first (else of the last run), for ``reduce``
    feeds: Feeds = field(default_factory=dict, repr=False)

    @property
    def passed(self) -> bool:
        return self.error is None and self.first is None

    @property
    def outputs(self) -> list[ValueDiff]:
        return [v for v in self.values if v.is_output]

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model, "providers": self.providers, "reference": self.reference, "rtol": self.rtol,
            "atol": self.atol, "runs": self.runs, "passed": self.passed, "error": self.error,
            "compared": len(self.values), "not_compared": self.not_compared,
            "first_divergence": self.first.to_dict() if self.first else None,
            "drift": [v.to_dict() for v in self.drift],
            "values": [v.to_dict() for v in self.values],
        }


def _describe(name: str, producer: Producer | None, model: Any, by_output: Mapping[str, Any],
              decisions: Mapping[str, Any]) -> tuple[str, str, str, str | None]:
    """(node, op type, provider, fused group) of the node that produced ``name``: the model's
    node when the step was a group or a rewrite, with the provider that ran it."""
    node = by_output.get(name)
    if producer is None:
        return (node.name if node is not None else "?", node.op_type if node is not None else "?", "?", None)
    decision = decisions.get(producer.node)
    if decision is not None:
        return producer.node, producer.op_type, producer.provider, decision.fused_group
    if node is not None:
        found = decisions.get(node.name)
        group = producer.node if producer.node != node.name else None
        provider = found.provider if found is not None else producer.provider
        return node.name or producer.node, node.op_type, provider, group
    return producer.node, producer.op_type, producer.provider, None


def _error_text(where: str, exc: Exception) -> str:
    return f"{where}: {type(exc).__name__}: {exc}"


def compare_captures(tested: Capture, reference: Capture, rtol: float, atol: float) -> dict[str, Stats]:
    """Stats of every value both captures hold, in the order ``tested`` produced them."""
    out: dict[str, Stats] = {}
    for name, value in tested.values.items():
        ref = reference.values.get(name)
        if ref is None:
            continue
        out[name] = compare(value, np.asarray(ref), rtol, atol)
    return out


def validate(model: Any, providers: Sequence[Any] = ("cpu",), reference: str = "cpu",
             feeds: Mapping[str, Any] | None = None, random: int | None = None, rtol: float = DEFAULT_RTOL,
             atol: float = DEFAULT_ATOL, seed: int = 0, dims: Mapping[str, int] | None = None, *, registry: Any = None,
             provider_options: Any = None) -> ValidationReport:
    """Compare ``model`` on ``providers`` with ``reference`` (``"cpu"`` or ``"onnxruntime"``).

    ``feeds``: the inputs; else ``random`` runs (default 1) on seeded random inputs made from
    the declared types (``dims`` sets symbolic dims, else 1). A value passes when
    ``|a - b| <= atol + rtol * |b|``. ``registry``: where providers come from (tests)."""
    proto, label = load_proto(model)
    if feeds is not None and random:
        raise InvalidArgumentError("give feeds or random, not both")
    if random is not None and random < 1:
        raise InvalidArgumentError(f"random must be >= 1, got {random}")
    if rtol < 0 or atol < 0:
        raise InvalidArgumentError(f"rtol and atol must be >= 0, got rtol={rtol}, atol={atol}")
    runner = reference_runner(reference)
    if feeds is not None:
        check_names(proto, feeds)
    runs = 1 if feeds is not None else (random or 1)
    report = ValidationReport(label, [str(p) for p in providers], reference, rtol, atol, runs)
    by_output = {o: node for node in proto.graph.node for o in node.output if o}
    outputs = {o.name for o in proto.graph.output}
    merged: dict[str, Stats] = {}
    info: dict[str, tuple[str, str, str, str | None, list[int]]] = {}
    kept_diverging = False
    for run in range(runs):
        run_feeds: Feeds = dict(feeds) if feeds is not None else random_feeds(proto, seed + run, dims)
        tested, session = session_capture(proto, providers, run_feeds, registry=registry,
                                          provider_options=provider_options)
        if session is None and isinstance(tested.error, InvalidArgumentError):
            raise tested.error  # an unknown provider or bad options: the caller's mistake, not a result
        decisions = {d.node: d for d in session.partition_report().nodes} if session is not None else {}
        ref = runner(proto, run_feeds, list(tested.values), registry, True)
        stats = compare_captures(tested, ref, rtol, atol)
        for name, s in stats.items():
            merged[name] = worst(merged[name], s) if name in merged else s
            if name not in info:
                node, op, provider, group = _describe(name, tested.producers.get(name), proto, by_output, decisions)
                info[name] = (node, op, provider, group, list(np.shape(tested.values[name])))
        report.not_compared = len(set(tested.values) ^ set(ref.values))
        diverged = any(not s.passed for s in stats.values())
        if not report.feeds or (diverged and not kept_diverging):
            report.feeds, kept_diverging = run_feeds, diverged  # the first run, or the first that diverged
        failed = tested.error or ref.error
        if failed is not None:
            report.error = _error_text("providers under test" if tested.error else f"reference {reference}", failed)
            report.feeds = run_feeds
            break
    report.values = [ValueDiff(name, *info[name][:4], info[name][4], name in outputs, s)
                     for name, s in merged.items()]
    report.first = next((v for v in report.values if not v.stats.passed), None)
    if report.first is not None:
        after = downstream(proto, report.first.name)
        report.drift = [v for v in report.values if v.name in after]
    return report
