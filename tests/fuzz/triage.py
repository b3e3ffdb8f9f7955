"""Triage of a fuzz run: figures per family, causes, and one minimal reproducer per cause.

A cause is (runtime, outcome, family, signature), the signature being the normalized first
line of the message and where it happened (outcome.signature). Its reproducer is the smallest
case found for it (fewest bytes of model, data files and feeds), saved as a case folder under
``<out>/reproducers/`` and replayed with ``python tests/fuzz/fuzz.py replay <folder>``.
Disagreements between epoxy and onnxruntime (compare.py) are causes too, grouped by seed and
normalized reason.

Everything is built from the JSON records the run writes (``results.jsonl``), so
``fuzz.py triage <out>`` prints the same tables again later.
"""

from __future__ import annotations

import collections
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from case import Case, save
from outcome import FAILURES, OUTCOMES, normalize, signature

REPLAY = "python tests/fuzz/fuzz.py replay"


@dataclass
class Cause:
    runtime: str
    outcome: str
    family: str
    signature: str
    count: int = 0
    smallest: str = ""
    smallest_size: int = -1
    description: str = ""
    detail: str = ""

    @property
    def key(self) -> tuple[str, str, str, str]:
        return self.runtime, self.outcome, self.family, self.signature

    @property
    def folder_name(self) -> str:
        digest = hashlib.sha1("\0".join(self.key).encode()).hexdigest()[:8]
        return f"{self.runtime}-{self.outcome}-{self.family}-{digest}"


@dataclass
class Triage:
    runtimes: list[str]
    out: Path | None = None  # where reproducers go (None: not saved)
    slow_seconds: float = 5.0
    families: dict[str, dict[str, collections.Counter[str]]] = field(default_factory=dict)
    compared: collections.Counter[tuple[str, str]] = field(default_factory=collections.Counter)
    matrix: collections.Counter[tuple[str, str]] = field(default_factory=collections.Counter)
    causes: dict[tuple[str, str, str, str], Cause] = field(default_factory=dict)
    slow: list[tuple[float, str, str, str]] = field(default_factory=list)
    cases: int = 0

    def add(self, record: dict[str, Any], case: Case | None = None) -> None:
        """Count one case (a results.jsonl record); ``case`` given: keep it if it is the smallest of a cause."""
        self.cases += 1
        family = record["family"]
        per_runtime = self.families.setdefault(family, {})
        results = record["results"]
        for runtime, result in results.items():
            per_runtime.setdefault(runtime, collections.Counter())[result["outcome"]] += 1
            self._cause(runtime, result["outcome"], family, signature(result["outcome"], result["detail"]),
                        record, result["detail"], case)
        if len(results) == 2:
            first, second = (r["outcome"] for r in results.values())
            self.matrix[(first, second)] += 1
        comparison = record.get("comparison")
        if comparison:
            kind = comparison.split(":", 1)[0]
            self.compared[(family, kind)] += 1
            if kind == "disagree":
                reason = comparison.split(":", 1)[1]
                self._cause("compare", "disagree", family, f"{record['seed']} · {normalize(reason)}", record,
                            comparison, case)
        epoxy = results.get("epoxy")
        if epoxy and epoxy["seconds"] >= self.slow_seconds and epoxy["outcome"] != "hang":
            self.slow.append((epoxy["seconds"], record["name"], epoxy["outcome"], record["description"]))

    def _cause(self, runtime: str, outcome: str, family: str, sig: str, record: dict[str, Any], detail: str,
               case: Case | None) -> None:
        key = (runtime, outcome, family, sig)
        cause = self.causes.get(key)
        if cause is None:
            cause = self.causes[key] = Cause(runtime, outcome, family, sig)
        cause.count += 1
        if cause.smallest_size < 0 or record["size"] < cause.smallest_size:
            cause.smallest, cause.smallest_size = record["name"], record["size"]
            cause.description, cause.detail = record["description"], detail
            if case is not None and self.out is not None and (outcome in FAILURES or outcome == "disagree"):
                folder = self.out / "reproducers" / cause.folder_name
                save(case, folder, found=outcome, detail=detail[:4000], replay=f"{REPLAY} {folder}")

    # -- tables ------------------------------------------------------------------------------
    def family_table(self) -> str:
        short = {"epoxy": "ep", "onnxruntime": "ort"}
        head = ["family", "cases"]
        for runtime in self.runtimes:
            head += [f"{short.get(runtime, runtime)} {o}" for o in OUTCOMES]
        compare = len(self.runtimes) == 2
        if compare:
            head += ["compared", "disagree"]
        rows = []
        totals: collections.Counter[str] = collections.Counter()
        for family in sorted(self.families):
            per = self.families[family]
            count = sum(per[self.runtimes[0]].values()) if self.runtimes[0] in per else 0
            row = [family, str(count)]
            totals["cases"] += count
            for runtime in self.runtimes:
                for o in OUTCOMES:
                    n = per.get(runtime, collections.Counter())[o]
                    totals[f"{runtime}:{o}"] += n
                    row.append(str(n))
            if compare:
                agree, disagree = self.compared[(family, "agree")], self.compared[(family, "disagree")]
                totals["compared"] += agree + disagree
                totals["disagree"] += disagree
                row += [str(agree + disagree), str(disagree)]
            rows.append(row)
        total = ["**all**", str(totals["cases"])]
        total += [str(totals[f"{r}:{o}"]) for r in self.runtimes for o in OUTCOMES]
        if compare:
            total += [str(totals["compared"]), str(totals["disagree"])]
        return _markdown(head, [*rows, total])

    def matrix_table(self) -> str:
        if not self.matrix:
            return ""
        a, b = self.runtimes
        seen_a = [o for o in OUTCOMES if any(k[0] == o for k in self.matrix)]
        seen_b = [o for o in OUTCOMES if any(k[1] == o for k in self.matrix)]
        rows = [[o, *(str(self.matrix[(o, p)]) for p in seen_b)] for o in seen_a]
        return _markdown([f"{a} \\ {b}", *seen_b], rows)

    def cause_table(self, runtime: str, outcomes: frozenset[str] | set[str], limit: int | None = None) -> str:
        causes = sorted((c for c in self.causes.values() if c.runtime == runtime and c.outcome in outcomes),
                        key=lambda c: (c.outcome, -c.count, c.family, c.signature))
        if limit is not None:
            causes = sorted(causes, key=lambda c: -c.count)[:limit]
        rows = []
        for c in causes:
            where = self._reproducer(c)
            rows.append([c.outcome, c.family, str(c.count), _cell(c.signature, 150), c.smallest,
                         f"`{REPLAY} {where}`" if where else "", _cell(c.description, 160)])
        return _markdown(["outcome", "family", "cases", "cause", "smallest", "replay", "smallest case"], rows)

    def _reproducer(self, cause: Cause) -> str:
        if self.out is None:
            return ""
        folder = self.out / "reproducers" / cause.folder_name
        return str(folder) if folder.is_dir() else ""

    def slow_table(self, limit: int = 15) -> str:
        rows = [[f"{s:.1f}", name, outcome, _cell(desc, 160)] for s, name, outcome, desc in
                sorted(self.slow, reverse=True)[:limit]]
        return _markdown(["seconds", "case", "outcome", "description"], rows)

    def failures(self, runtime: str = "epoxy") -> int:
        return sum(c.count for c in self.causes.values() if c.runtime == runtime and c.outcome in FAILURES)

    def render(self, errors: int = 15) -> str:
        parts = [f"## Figures per family ({self.cases} cases)\n", self.family_table()]
        if self.matrix:
            parts += ["\n## epoxy outcome (rows) against onnxruntime outcome (columns)\n", self.matrix_table()]
        for runtime in self.runtimes:
            found = self.cause_table(runtime, FAILURES)
            parts += [f"\n## {runtime}: causes of foreign / crash / hang / oom / escape\n",
                      found if found.count("\n") > 1 else "none"]
        if any(c.runtime == "compare" for c in self.causes.values()):
            parts += ["\n## Disagreements (both ran; outputs differ)\n", self.cause_table("compare", {"disagree"})]
        if errors and "epoxy" in self.runtimes:
            parts += [f"\n## epoxy: the {errors} most frequent error causes (refusals, for reference)\n",
                      self.cause_table("epoxy", {"error"}, limit=errors)]
        if self.slow:
            parts += [f"\n## Slowest epoxy cases (>= {self.slow_seconds:g} s, not hangs)\n", self.slow_table()]
        return "\n".join(parts) + "\n"


def _cell(text: str, width: int) -> str:
    text = " ".join(text.split()).replace("|", "\\|")
    return text if len(text) <= width else text[: width - 1] + "…"


def _markdown(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)
