"""The mutation families, registered by name, and the case generator.

A case is drawn from ``random.Random(f"{seed}:{index}")`` alone, so ``(seed, index)`` (with
the same families and onnx release) rebuilds it exactly: the family by weight, a seed model
that family can act on, one to three of the family's mutations, the session options.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from case import MODEL_FILE, Case
from mutators import attributes, external, feeds, graph, raw_bytes, shapes, subgraphs
from mutators.common import Draft, apply_some
from seedbank import Seed

#: share of cases drawn from the hand-written seeds (they reach sparse tensors, functions...)
HAND_WRITTEN_SHARE = 0.15


@dataclass(frozen=True)
class Family:
    name: str
    mutations: Sequence[Callable[[random.Random, Draft], str | None]]
    needs: frozenset[str]  # seed features it needs (seedbank.features)
    weight: float
    doc: str


FAMILIES: dict[str, Family] = {f.name: f for f in [
    Family("bytes", raw_bytes.MUTATIONS, frozenset(), 1.0, raw_bytes.__doc__ or ""),
    Family("attribute", attributes.MUTATIONS, frozenset({"attribute"}), 2.0, attributes.__doc__ or ""),
    Family("shape", shapes.MUTATIONS, frozenset({"node"}), 1.5, shapes.__doc__ or ""),
    Family("graph", graph.MUTATIONS, frozenset({"node"}), 1.5, graph.__doc__ or ""),
    Family("subgraph", subgraphs.MUTATIONS, frozenset({"subgraph"}), 1.0, subgraphs.__doc__ or ""),
    Family("external", external.MUTATIONS, frozenset({"node"}), 1.0, external.__doc__ or ""),
    Family("feeds", feeds.MUTATIONS, frozenset({"input"}), 1.5, feeds.__doc__ or ""),
]}


def _options(rng: random.Random) -> dict[str, Any]:
    check = rng.choices(["warn", "off", "strict"], [0.7, 0.2, 0.1])[0]
    return {"check_model": check, "infer_shapes": rng.random() < 0.9}


@functools.cache
def _eligible(family: str, seeds: tuple[Seed, ...]) -> tuple[list[Seed], list[Seed]]:
    """The seeds ``family`` can act on, and the hand-written ones among them."""
    eligible = [s for s in seeds if FAMILIES[family].needs <= s.features]
    return eligible, [s for s in eligible if s.name.startswith("hand:")]


def make_case(seed: int, index: int, seeds: Sequence[Seed], families: Sequence[str] | None = None) -> Case:
    """Case ``index`` of fuzz seed ``seed``."""
    rng = random.Random(f"{seed}:{index}")
    chosen = [FAMILIES[name] for name in (families or FAMILIES)]
    family = rng.choices(chosen, [f.weight for f in chosen])[0]
    eligible, hand = _eligible(family.name, tuple(seeds))
    pool = hand if hand and (rng.random() < HAND_WRITTEN_SHARE or len(hand) == len(eligible)) else eligible
    start = rng.choice(pool)
    options = _options(rng)
    feeds = dict(start.feeds) if start.feeds is not None else None
    draft = Draft(start.proto(), feeds)
    if not apply_some(rng, draft, family.mutations):
        draft.notes.append("no mutation applied")
    data = draft.data
    if data is None:
        try:
            data = draft.model.SerializeToString()
        except Exception as exc:  # noqa: BLE001 - a proto that cannot serialize: the seed's bytes run
            draft.notes.append(f"serialize failed ({type(exc).__name__}); seed bytes used")
            data = start.model
    if draft.inputs_changed and rng.random() < 0.5:
        draft.feeds = None
        draft.notes.append("feeds built from the declared inputs")
    by_path = draft.by_path or bool(draft.files or draft.cwd_files) or rng.random() < 0.2
    notes = [f"seed {start.name}", *draft.notes]
    if options != {"check_model": "warn", "infer_shapes": True}:
        notes.append(f"options {options}")
    return Case(name=f"s{seed}-{index:06d}", family=family.name, description="; ".join(notes),
                files={MODEL_FILE: data, **draft.files}, feeds=draft.feeds, by_path=by_path, options=options,
                cwd_files=draft.cwd_files, must_refuse=draft.must_refuse, seed=start.name)


def generate(seed: int, count: int, seeds: Sequence[Seed], families: Sequence[str] | None = None,
             start: int = 0) -> Iterator[Case]:
    """Cases ``start .. start+count-1`` of ``seed``."""
    for index in range(start, start + count):
        yield make_case(seed, index, seeds, families)
