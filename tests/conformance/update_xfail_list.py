"""Regenerate expected_failures.txt from a run: one line per failing case with its error.

    python tests/conformance/update_xfail_list.py

Reasons come from the actual failure (first line of the error); edit them into a
concrete cause where the error alone does not say it. Cases that pass are dropped.
"""

from __future__ import annotations

from pathlib import Path

from epoxy_sdk.conformance.backend_suite import all_cases
from epoxy_sdk.conformance.cli import run_cases

TARGET = Path(__file__).with_name("expected_failures.txt")
HEADER = """\
# ONNX backend cases epoxy (ep-cpu) does not pass yet: "<case> <reason>" per line.
# A listed case that starts passing fails the suite: remove it (shrinking this is progress).
"""


def main() -> None:
    old = {}
    if TARGET.exists():
        for line in TARGET.read_text().splitlines():
            if line and not line.startswith("#"):
                name, _, reason = line.partition(" ")
                old[name] = reason
    cases = all_cases()
    results = {r.name: r.message for r in run_cases(cases, ["cpu"])}
    lines = []
    for case in cases:
        failure = results[case.name]
        if failure is None:
            continue
        reason = (
            old.get(case.name)
            if case.name in old
            and not old[case.name].startswith(("UnsupportedOpError", "AssertionError", "KernelError"))
            else failure
        )
        lines.append(f"{case.name} {reason}")
    TARGET.write_text(HEADER + "\n".join(lines) + "\n")
    print(f"{len(lines)} expected failures written to {TARGET}")


if __name__ == "__main__":
    main()
