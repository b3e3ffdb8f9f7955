"""``epoxy ops --provider cpu`` matches what the suite exercises: every op a case uses is
listed with an opset range covering the case's opset (or is run by the core itself)."""

from __future__ import annotations

import json
import subprocess
import sys

from epoxy_sdk.conformance.backend_suite import all_cases

CORE_OPS = {("", "If"), ("", "Loop"), ("", "Scan"), ("", "SequenceMap"), ("ai.onnx.preview.training", "Gradient")}


def test_ops_table_covers_every_op_and_opset_in_the_suite():
    out = subprocess.run([sys.executable, "-m", "epoxy.cli.main", "ops", "--provider", "cpu", "--json"],
                         capture_output=True, text=True, check=True).stdout
    table = {("" if o["domain"] == "ai.onnx" else o["domain"], o["op"]): o["since"] for o in json.loads(out)}
    missing = set()
    for case in all_cases():
        model = case.load_model()
        opsets = {("" if i.domain == "ai.onnx" else i.domain): i.version for i in model.opset_import}
        for node in model.graph.node:
            key = ("" if node.domain == "ai.onnx" else node.domain, node.op_type)
            if key in CORE_OPS:
                continue
            since = table.get(key)
            if since is None or min(since) > opsets.get(key[0], 0):
                missing.add((key, opsets.get(key[0])))
    assert not missing, f"ops used by the suite but not in `epoxy ops --provider cpu`: {sorted(missing)[:20]}"
