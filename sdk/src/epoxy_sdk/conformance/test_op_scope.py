"""Op scope: every ONNX backend node case whose nodes the provider claims, no fallback."""

from __future__ import annotations

import pytest

from epoxy_sdk.conformance.backend_suite import case_ops, load_cases
from epoxy_sdk.conformance.pytest_plugin import record_op_result

CASES = load_cases("node")


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_node_case(case, epoxy_provider_name, epoxy_device, request):
    from epoxy import UnsupportedOpError
    from epoxy_sdk.conformance.backend_suite import run_case

    ops = case_ops(case)
    try:
        run_case(case, [epoxy_provider_name], disable_fallback=True)
    except UnsupportedOpError as exc:
        pytest.skip(f"not claimed: {exc}")
    except Exception:
        record_op_result(request.config, ops, "failed")
        raise
    record_op_result(request.config, ops, "passed")
