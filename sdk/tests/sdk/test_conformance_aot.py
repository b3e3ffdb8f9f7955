"""The kit's ahead-of-time scope (SDK API 1.2): a provider whose export/import is right passes
it; each broken one fails the test that names its fault; one without the optional methods
has the scope skipped with the reason (all through pytester, on the kit's own models)."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

CONFTEST = '''
import hashlib
import json

import numpy as np
from epoxy.contract import Capability, CompiledArtifact, Device, FusedGroup
from epoxy.errors import ArtifactRefused
from epoxy.kit import HostAllocator, KernelProvider, KernelRegistry, convex_groups
from epoxy.plugins import reset_default_registry
from epoxy.testing import registry_with

KERNELS = KernelRegistry()
for op, fn in {"Add": np.add, "Mul": np.multiply, "MatMul": np.matmul}.items():
    KERNELS.register(op, (7, 13, 14))(lambda node, fn=fn: fn)
for op, fn in {"Relu": lambda x: np.maximum(x, x.dtype.type(0)), "Neg": np.negative, "Abs": np.abs,
               "Tanh": np.tanh}.items():
    KERNELS.register(op, (6, 13, 14))(lambda node, fn=fn: fn)
FUSIBLE = {"Relu", "Neg", "Abs", "Tanh", "Add", "Mul"}
MAGIC = b"KITFUSE1"
FORMAT = "tests.kit_fuser/1"


def program(sub, names):
    """The group's kernel: its nodes (found by name) run in order."""
    by_name = {n.name: n for n in sub.graph.nodes}
    kernels = [(n, KERNELS.lookup(n)[0](n)) for n in (by_name[name] for name in names)]

    def run(*values):
        env = dict(zip(sub.inputs, values))
        for n, fn in kernels:
            env[n.outputs[0]] = fn(*[env[i] for i in n.inputs])
        return tuple(env[o] for o in sub.outputs)
    return run


class Fuser:
    """A compiling provider without the optional ahead-of-time methods."""

    def __init__(self, name, device, options):
        self.name, self.device, self.allocator = name, device, HostAllocator(device)
        self.options = {k: str(v) for k, v in options.items()}

    def capability(self, graph):
        supported = [n.index for n in graph.nodes if n.op_type in FUSIBLE]
        groups, declined = convex_groups(graph, supported, provider=self.name)
        return Capability(groups=tuple(FusedGroup(g, f"{self.name}{k}") for k, g in enumerate(groups)),
                          declined=declined)

    def kernel(self, node):
        raise NotImplementedError

    def compile(self, sub):
        return program(sub, [sub.graph.nodes[i].name for i in sorted(sub.group.nodes)])


class AotFuser(Fuser):
    """Right: the blob is a magic, its payload's sha256 and the payload (node names and the
    group's boundary); import checks format, target, options, magic, digest, then rebuilds."""
    target = "host"

    def export_compiled(self, kernel, sub):
        payload = json.dumps({"nodes": [sub.graph.nodes[i].name for i in sorted(sub.group.nodes)],
                              "inputs": list(sub.inputs), "outputs": list(sub.outputs)}).encode()
        return CompiledArtifact(FORMAT, MAGIC + hashlib.sha256(payload).digest() + payload, self.target,
                                dict(self.options))

    def check(self, artifact):
        if artifact.format != FORMAT:
            raise ArtifactRefused(f"format {artifact.format!r}, this reads {FORMAT!r}", provider=self.name)
        if artifact.target != self.target:
            raise ArtifactRefused(f"built for {artifact.target!r}, this is {self.target!r}", provider=self.name)
        if dict(artifact.options) != self.options:
            raise ArtifactRefused(f"options {dict(artifact.options)}, now {self.options}", provider=self.name)

    def payload(self, blob):
        if len(blob) < len(MAGIC) + 32 or not blob.startswith(MAGIC):
            raise ArtifactRefused("not a kit fuser blob (magic, or cut short)", provider=self.name)
        digest, payload = blob[len(MAGIC):len(MAGIC) + 32], blob[len(MAGIC) + 32:]
        if hashlib.sha256(payload).digest() != digest:
            raise ArtifactRefused("payload digest mismatch", provider=self.name)
        return json.loads(payload)

    def import_compiled(self, sub, artifact):
        self.check(artifact)
        body = self.payload(artifact.blob)
        if body["inputs"] != list(sub.inputs) or body["outputs"] != list(sub.outputs):
            raise ArtifactRefused("compiled for another group", provider=self.name)
        return program(sub, body["nodes"])


class ImportDiffers(AotFuser):
    def import_compiled(self, sub, artifact):
        run = super().import_compiled(sub, artifact)
        return lambda *values: tuple(v + v.dtype.type(1) for v in run(*values))


class NoDigest(AotFuser):
    """Parses the payload without checking its length or digest: a cut blob is a JSON error."""
    def payload(self, blob):
        if not blob.startswith(MAGIC):
            raise ArtifactRefused("not a kit fuser blob", provider=self.name)
        return json.loads(blob[len(MAGIC) + 32:])


class AcceptsForeign(AotFuser):
    def check(self, artifact):
        pass


class RefusesAll(AotFuser):
    def import_compiled(self, sub, artifact):
        raise ArtifactRefused("never", provider=self.name)


class ExportRaises(AotFuser):
    def export_compiled(self, kernel, sub):
        raise RuntimeError("serializer crashed")


class CrashesOnShortBlob(AotFuser):
    """A native crash stand-in: the process dies on a damaged blob of its own instead of
    refusing it (a cut or flipped one: its magic is there, its digest is wrong)."""
    def import_compiled(self, sub, artifact):
        blob, cut = artifact.blob, len(MAGIC) + 32
        if blob.startswith(MAGIC) and hashlib.sha256(blob[cut:]).digest() != blob[len(MAGIC):cut]:
            import os
            os.abort()
        return super().import_compiled(sub, artifact)


class Factory:
    vendor, version, sdk_api, priority = "tests", "1.0", "1.2", 5

    def __init__(self, name, make, sdk_api="1.2"):
        self.name, self.make, self.sdk_api = name, make, sdk_api

    def devices(self):
        return [Device(self.name, "cpu")]

    def create(self, device, options):
        return self.make(self.name, device, options)


registry = registry_with(
    Factory("cpu", lambda n, d, o: KernelProvider(n, d, KERNELS, o)),
    Factory("fuser", Fuser, sdk_api="1.1"),
    Factory("aot", AotFuser),
    Factory("aot_differs", ImportDiffers),
    Factory("aot_no_digest", NoDigest),
    Factory("aot_accepts_foreign", AcceptsForeign),
    Factory("aot_refuses_all", RefusesAll),
    Factory("aot_export_raises", ExportRaises),
    Factory("aot_sdk_1_1", AotFuser, sdk_api="1.1"),
    Factory("aot_crashes", CrashesOnShortBlob),
    plugin_name="kit-test",
)
reset_default_registry(registry)
'''

ROUND_TRIP = "test_compiled_model_loads_its_blobs_and_matches_a_fresh_session"
UNTRUSTED = "test_blob_signed_by_another_key_is_refused_or_identical"


def _aot_scope(pytester, provider: str, *extra: str):
    pytester.makeconftest(CONFTEST)
    return pytester.runpytest_inprocess("--pyargs", "epoxy_sdk.conformance", "--epoxy-provider", provider,
                                        "--epoxy-scope", "aot", "-p", "no:cacheprovider", "-rfEs", *extra)


def _failed(out: str) -> set[str]:
    """Names (with parameters) of the tests the short summary lists as failed."""
    return {line.split("::", 1)[1].split(" ", 1)[0] for line in out.splitlines()
            if line.startswith("FAILED") and "::" in line}


def test_a_correct_provider_passes_every_check(pytester):
    result = _aot_scope(pytester, "aot", "-v")
    out = result.stdout.str()
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) == 0 and outcomes.get("skipped", 0) == 0, out[-3000:]
    assert outcomes.get("passed", 0) == 12, out[-3000:]  # 5 checks + 7 kinds of unfit blob


def test_a_provider_without_the_methods_is_skipped_with_the_reason(pytester):
    result = _aot_scope(pytester, "fuser")
    out = result.stdout.str()
    outcomes = result.parseoutcomes()
    assert outcomes.get("skipped", 0) == 12 and "passed" not in outcomes and "failed" not in outcomes, out[-3000:]
    assert "provider does not implement export_compiled (optional, SDK API 1.2)" in out, out[-3000:]


@pytest.mark.parametrize(("provider", "failing", "message"), [
    ("aot_differs", {ROUND_TRIP, UNTRUSTED}, "values differ from a fresh session's"),
    ("aot_no_digest", {"test_unfit_blob_is_refused[truncated]", "test_unfit_blob_is_refused[flipped-byte]"},
     "raised JSONDecodeError"),
    ("aot_accepts_foreign", {"test_unfit_blob_is_refused[foreign-format]", "test_unfit_blob_is_refused[other-target]",
                             "test_unfit_blob_is_refused[other-options]"}, "accepted it"),
    ("aot_refuses_all", {ROUND_TRIP, "test_intact_blob_is_imported"}, "refused the blob: never"),
    ("aot_sdk_1_1", {"test_aot_methods_come_in_pairs_and_declare_sdk_api_1_2"}, "declares sdk_api '1.1'"),
])
def test_broken_providers_fail_the_check_that_names_their_fault(pytester, provider, failing, message):
    result = _aot_scope(pytester, provider)
    out = result.stdout.str()
    assert result.ret != 0, out[-3000:]
    assert _failed(out) == failing, out[-3000:]
    assert message in out, out[-3000:]


def test_an_export_that_raises_fails_the_scope(pytester):
    result = _aot_scope(pytester, "aot_export_raises")
    out = result.stdout.str()
    assert result.ret != 0 and "serializer crashed" in out, out[-3000:]
    assert ROUND_TRIP in "".join(_failed(out)), out[-3000:]


def test_the_api_scope_includes_the_aot_checks_and_the_op_scope_does_not(pytester):
    pytester.makeconftest(CONFTEST)
    api = pytester.runpytest_inprocess("--pyargs", "epoxy_sdk.conformance", "--epoxy-provider", "aot",
                                       "--epoxy-scope", "api", "-p", "no:cacheprovider", "--collect-only", "-q")
    assert "test_aot_scope.py" in api.stdout.str() and "test_op_scope.py" not in api.stdout.str()
    op = pytester.runpytest_inprocess("--pyargs", "epoxy_sdk.conformance", "--epoxy-provider", "aot",
                                      "--epoxy-scope", "op", "-p", "no:cacheprovider", "--collect-only", "-q",
                                      "-k", "test_relu")
    assert "test_aot_scope.py" not in op.stdout.str() and "test_api_scope.py" not in op.stdout.str()


def test_a_native_crash_under_xdist_fails_its_test_and_the_run_goes_on(pytester):
    """What the kit's docstring promises: with ``-n 1`` a crash in ``import_compiled`` is that
    test's failure (pytest-xdist replaces the worker), the other checks still run."""
    pytest.importorskip("xdist")
    pytester.makeconftest(CONFTEST)
    result = pytester.runpytest_subprocess("--pyargs", "epoxy_sdk.conformance", "--epoxy-provider", "aot_crashes",
                                           "--epoxy-scope", "aot", "-p", "no:cacheprovider", "-n", "1", "-rf")
    out = result.stdout.str()
    assert _failed(out) == {"test_unfit_blob_is_refused[truncated]", "test_unfit_blob_is_refused[flipped-byte]"}, \
        out[-3000:]
    assert "crashed" in out and result.parseoutcomes().get("passed", 0) == 10, out[-3000:]
