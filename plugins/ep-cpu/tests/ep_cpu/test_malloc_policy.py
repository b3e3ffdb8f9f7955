"""``malloc_policy.py`` (the ``heap_arrays`` option): applied once per process when a cpu
provider is created with it on; a process whose owner chose glibc's malloc settings is left
alone; and where applied, freeing and reallocating a multi-MB array no longer page-faults."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from epoxy_ep_cpu import malloc_policy

GLIBC = malloc_policy._glibc() is not None

#: a child process: a cpu session (the option from argv), then three 8 MiB arrays allocated,
#: written and freed together 20 times; prints the policy's status and the minor faults
CHILD = textwrap.dedent("""
    import resource, sys
    import numpy as np
    import onnx
    from onnx import TensorProto, helper
    import epoxy
    from epoxy_ep_cpu import malloc_policy

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString()
    epoxy.InferenceSession(model, providers=[("cpu", {"heap_arrays": sys.argv[1]})])
    def run():  # a run's activations: several live at once, then all freed
        arrays = [np.empty(2 << 20, np.float32) for _ in range(3)]
        for a in arrays:
            a.fill(1.0)

    run()  # the first run grows the heap either way
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(20):
        run()
    print(malloc_policy.status())
    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
""")


def _child(option: str, **env: str) -> tuple[str, int]:
    import os

    full = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "EPOXY_CPU_HEAP_ARRAYS"}
    full.update(env)
    out = subprocess.run([sys.executable, "-c", CHILD, option], capture_output=True, text=True, env=full,
                         timeout=300, check=True).stdout.strip().splitlines()
    return out[-2], int(out[-1])


@pytest.mark.skipif(not GLIBC, reason="the policy applies to glibc's malloc only (this platform has another)")
def test_applied_the_arrays_stop_page_faulting():
    status, faults = _child("on")
    assert status.startswith("applied")
    status_off, faults_off = _child("off")
    assert status_off.startswith("not applied")
    # 20 x 24 MiB written: ~120,000 page faults when glibc hands the freed heap back, ~0 when kept
    assert faults_off > 10_000 and faults < faults_off // 20


@pytest.mark.skipif(not GLIBC, reason="the policy applies to glibc's malloc only (this platform has another)")
def test_an_owner_set_malloc_policy_is_left_alone():
    status, _ = _child("on", MALLOC_ARENA_MAX="2", MALLOC_TRIM_THRESHOLD_="1048576")
    assert status == "left as it is: MALLOC_TRIM_THRESHOLD_ is set"


def test_owner_variables_and_tunables_are_read(monkeypatch):
    monkeypatch.setattr(malloc_policy, "_state", {})
    for name in malloc_policy.OWNER_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.mmap_threshold=4096")
    assert malloc_policy.apply() == "left as it is: GLIBC_TUNABLES sets glibc.malloc tunables"
    assert malloc_policy.apply() == malloc_policy.status()  # once per process: the first answer stays
