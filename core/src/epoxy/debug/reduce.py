"""``reduce``: shrink a model to a few nodes that still fail, or still diverge, on a provider.

The reference runs the full model once, unoptimized, keeping every value. A candidate is
a connected set of nodes made into a model (:mod:`epoxy.debug.subgraph`) whose inputs are
fed those real values, so it sees what it saw in the full model. The search is ddmin over
the nodes (Zeller's delta debugging: try chunks, then complements, halving the chunk size),
then a pass removing one node at a time, every check counted against ``max_tries``. The
node the full run blames (the failing node, the first diverging value's producer) is tried
alone first: most reductions end there.

"Still fails" means the same exception type on the providers under test while the
reference runs the candidate cleanly (a candidate broken for everyone is not the bug).
"Still diverges" means some value of the candidate, computed by the providers under test,
is out of tolerance against the reference's value from the full run.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InvalidArgumentError
from .capture import Capture
from .compare import DEFAULT_ATOL, DEFAULT_RTOL
from .feeds import Feeds, check_names, random_feeds
from .model_io import load_proto, producers
from .references import reference_runner, session_capture
from .subgraph import NotExtractable, Subgraph, connected, extract
from .validate import compare_captures

MODES = ("fails", "diverges")


@dataclass
class ReducedCase:
    """The smallest node set found, as a model with its feeds."""

    model: Any
    feeds: Feeds
    nodes: list[str]
    op_types: list[str]
    providers: list[str]
    mode: str
    reference: str
    tries: int
    original_nodes: int
    #: the exception (fails) or the diverging values (diverges) of the reduced model
    detail: str = ""
    rtol: float = DEFAULT_RTOL
    atol: float = DEFAULT_ATOL
    written: dict[str, str] = field(default_factory=dict)

    def save(self, out_dir: str | Path) -> dict[str, str]:
        """Write ``reduced.onnx`` and ``feeds.npz`` into ``out_dir``; returns their paths."""
        import onnx

        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        model_path, feeds_path = out / "reduced.onnx", out / "feeds.npz"
        onnx.save(self.model, str(model_path))
        np.savez(feeds_path, **self.feeds)  # type: ignore[arg-type]
        self.written = {"model": str(model_path), "feeds": str(feeds_path)}
        return self.written

    def rerun_command(self) -> str:
        """The CLI line that shows the problem again on the written files."""
        if not self.written:
            raise InvalidArgumentError("save() the case first: the command names its files")
        return (f"epoxy validate {shlex.quote(self.written['model'])} --providers {','.join(self.providers)} "
                f"--reference {self.reference} --inputs {shlex.quote(self.written['feeds'])} "
                f"--rtol {self.rtol:g} --atol {self.atol:g}")

    def rerun_python(self) -> str:
        """The same as a Python one-liner."""
        if not self.written:
            raise InvalidArgumentError("save() the case first: the code names its files")
        call = (f"d.validate({self.written['model']!r}, {self.providers!r}, reference={self.reference!r}, "
                f"feeds=dict(np.load({self.written['feeds']!r})), rtol={self.rtol:g}, atol={self.atol:g})")
        return ("python -c \"import numpy as np, epoxy.debug as d; "
                f"print((lambda r: r.error or (r.first and r.first.to_dict()) or 'ok')({call}))\"")

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "providers": self.providers, "reference": self.reference, "nodes": self.nodes,
                "op_types": self.op_types, "tries": self.tries, "original_nodes": self.original_nodes,
                "detail": self.detail, "written": self.written}


class _Search:
    """The interestingness test with its cache and try budget."""

    def __init__(self, model: Any, check: Callable[[Subgraph], str | None], values: Mapping[str, np.ndarray],
                 feeds: Feeds, max_tries: int) -> None:
        self.model, self.check, self.values, self.feeds = model, check, values, feeds
        self.max_tries = max_tries
        self.tries = 0
        self._seen: dict[frozenset[int], str | None] = {}

    @property
    def exhausted(self) -> bool:
        return self.tries >= self.max_tries

    def __call__(self, nodes: Collection[int]) -> bool:
        key = frozenset(nodes)
        if key in self._seen:
            return self._seen[key] is not None
        if not key or not connected(self.model, key) or self.exhausted:
            return False
        self.tries += 1
        try:
            result = self.check(extract(self.model, key, self.values, self.feeds))
        except NotExtractable:
            result = None
        self._seen[key] = result
        return result is not None

    def detail(self, nodes: Collection[int]) -> str:
        return self._seen.get(frozenset(nodes)) or ""


def _chunks(items: list[int], n: int) -> list[list[int]]:
    size, extra = divmod(len(items), n)
    out, start = [], 0
    for k in range(n):
        end = start + size + (1 if k < extra else 0)
        out.append(items[start:end])
        start = end
    return [c for c in out if c]


def ddmin(items: list[int], test: _Search) -> list[int]:
    """The classic ddmin: a 1-minimal subset of ``items`` (as far as the budget allows)."""
    n = 2
    while len(items) >= 2 and not test.exhausted:
        chunks = _chunks(items, n)
        for chunk in chunks:
            if test(chunk):
                items, n = chunk, 2
                break
        else:
            for k in range(len(chunks)):
                rest = [x for j, c in enumerate(chunks) if j != k for x in c]
                if test(rest):
                    items, n = rest, max(n - 1, 2)
                    break
            else:
                if n >= len(items):
                    break
                n = min(len(items), 2 * n)
    return items


def drop_one_by_one(items: list[int], test: _Search) -> list[int]:
    """Remove single nodes while the rest stays interesting (ddmin can stop short of this
    when a connected smaller set needs two chunks' nodes)."""
    changed = True
    while changed and len(items) > 1 and not test.exhausted:
        changed = False
        for node in list(items):
            rest = [x for x in items if x != node]
            if test(rest):
                items, changed = rest, True
                break
    return items


def _fails_check(providers: Sequence[Any], expected: type, reference: Callable[..., Capture], registry: Any,
                 provider_options: Any) -> Callable[[Subgraph], str | None]:
    def check(sub: Subgraph) -> str | None:
        tested, _ = session_capture(sub.model, providers, sub.feeds, registry=registry,
                                    provider_options=provider_options)
        if not isinstance(tested.error, expected):
            return None
        if reference(sub.model, sub.feeds, [], registry, False).error is not None:
            return None  # broken for the reference too: a bad cut, not the provider's bug
        return f"{type(tested.error).__name__}: {tested.error}"

    return check


def _diverges_check(providers: Sequence[Any], ref: Capture, rtol: float, atol: float, registry: Any,
                    provider_options: Any) -> Callable[[Subgraph], str | None]:
    def check(sub: Subgraph) -> str | None:
        tested, _ = session_capture(sub.model, providers, sub.feeds, registry=registry,
                                    provider_options=provider_options)
        if tested.error is not None:
            return None
        bad = [name for name, s in compare_captures(tested, ref, rtol, atol).items() if not s.passed]
        return ",".join(bad) or None

    return check


def _suspect(model: Any, mode: str, tested: Capture, ref: Capture, rtol: float, atol: float) -> int | None:
    """The node the full run blames: the failing node, or the first diverging value's producer."""
    if mode == "fails":
        name = getattr(tested.error, "node", None)
        return next((i for i, n in enumerate(model.graph.node) if name and n.name == name), None)
    bad = [name for name, s in compare_captures(tested, ref, rtol, atol).items() if not s.passed]
    return producers(model).get(bad[0]) if bad else None


def reduce(model: Any, providers: Sequence[Any], mode: str | None = None, feeds: Mapping[str, Any] | None = None,
           reference: str = "cpu", rtol: float = DEFAULT_RTOL, atol: float = DEFAULT_ATOL, *, seed: int = 0,
           dims: Mapping[str, int] | None = None, max_tries: int = 200, guess: bool = True, registry: Any = None,
           provider_options: Any = None) -> ReducedCase:
    """Delta-debug ``model`` to a small node set that still fails (``mode="fails"``: raises on
    ``providers``) or still diverges (``"diverges"``: out of tolerance against ``reference``);
    ``mode=None`` picks ``fails`` when the full model raises, else ``diverges``. ``feeds``:
    the inputs (default: seeded random ones). ``guess=False`` skips trying the blamed node
    alone first (the search then starts from the whole graph). Raises InvalidArgumentError when the full model
    shows no such problem."""
    if mode is not None and mode not in MODES:
        raise InvalidArgumentError(f"mode must be one of {MODES}, got {mode!r}")
    if max_tries < 1:
        raise InvalidArgumentError(f"max_tries must be >= 1, got {max_tries}")
    proto, _ = load_proto(model)
    full_feeds: Feeds = {k: np.asarray(v) for k, v in feeds.items()} if feeds is not None else \
        random_feeds(proto, seed, dims)
    check_names(proto, full_feeds)
    runner = reference_runner(reference)
    every = [o for node in proto.graph.node for o in node.output if o]
    ref = runner(proto, full_feeds, every, registry, False)
    if ref.error is not None:
        raise InvalidArgumentError(f"the reference {reference!r} fails on the full model, so it cannot supply "
                                   f"the intermediate values: {type(ref.error).__name__}: {ref.error}")
    tested, session = session_capture(proto, providers, full_feeds, registry=registry,
                                      provider_options=provider_options)
    if session is None and isinstance(tested.error, InvalidArgumentError):
        raise tested.error  # an unknown provider or bad options
    mode = mode or ("fails" if tested.error is not None else "diverges")
    names = ", ".join(str(p) for p in providers)
    if mode == "fails":
        if tested.error is None:
            raise InvalidArgumentError(f"the model runs without error on {names}: nothing fails to reduce "
                                       "(try mode 'diverges')")
        check = _fails_check(providers, type(tested.error), runner, registry, provider_options)
    else:
        if tested.error is not None:
            raise InvalidArgumentError(f"the model raises on {names} ({type(tested.error).__name__}: "
                                       f"{tested.error}): reduce it with mode 'fails'")
        if all(s.passed for s in compare_captures(tested, ref, rtol, atol).values()):
            raise InvalidArgumentError(f"the model does not diverge on {names} from {reference!r} within "
                                       f"rtol={rtol:g}, atol={atol:g}: nothing to reduce")
        check = _diverges_check(providers, ref, rtol, atol, registry, provider_options)
    search = _Search(proto, check, ref.values, full_feeds, max_tries)
    suspect = _suspect(proto, mode, tested, ref, rtol, atol) if guess else None
    if suspect is not None and search([suspect]):
        found = [suspect]
    else:
        found = drop_one_by_one(ddmin(list(range(len(proto.graph.node))), search), search)
    if not search([*found]):  # the budget ran out before anything smaller was seen failing
        found = list(range(len(proto.graph.node)))
    detail = search.detail(found)
    outputs = detail.split(",") if mode == "diverges" and detail else None
    case = extract(proto, found, ref.values, full_feeds, outputs)
    nodes = [proto.graph.node[i] for i in case.nodes]
    return ReducedCase(case.model, case.feeds, [n.name for n in nodes], [n.op_type for n in nodes],
                       [str(p) for p in providers], mode, reference, search.tries, len(proto.graph.node),
                       detail if mode == "fails" else f"diverging values: {detail}", rtol, atol)
