"""Ahead-of-time scope (SDK API 1.2): for a provider with the optional ``export_compiled`` /
``import_compiled``, a compiled model loads its blobs and computes bit for bit what a fresh
session computes, and every unfit blob is refused with :class:`epoxy.errors.ArtifactRefused`.

A provider without ``export_compiled`` has these tests skipped (the methods are optional).
Everything runs in this process: a native crash in ``import_compiled`` stops the run with
pytest's faulthandler traceback naming the test; run the kit with ``-n 1`` (pytest-xdist) to
have it reported as that test's failure instead, and the run go on.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from epoxy.errors import ArtifactRefused
from epoxy.sdk_api import parse

from .aot_cases import DAMAGES, NOT_IMPLEMENTED, Damage, Exports, artifact_problems, export_groups
from .kit_models import kit_model
from .kit_sessions import chain_cases, kit_session, session_options

LOADED = "loaded from the compiled blob"
#: why a compiling provider may have no group on the kit's small models, and what to do
SMALL_GROUPS = ("a provider that declines groups below a size or cost threshold is tested with the option "
                "lowering it, e.g. --epoxy-provider-option min_group_cost=0 for openvino")


@pytest.fixture(scope="module", autouse=True)
def _kit_compile_key(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Compiled models are signed with a key of this kit run, never the user's own."""
    key = tmp_path_factory.mktemp("aot_key") / "compile.key"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("EPOXY_COMPILE_KEY", str(key))
        yield key


@pytest.fixture(scope="module")
def aot_provider(epoxy_provider: Any) -> Any:
    """The kit's provider, when it implements the optional methods (else the test skips)."""
    if getattr(epoxy_provider, "export_compiled", None) is None:
        pytest.skip(NOT_IMPLEMENTED)
    return epoxy_provider


@pytest.fixture(scope="module")
def aot_models(aot_provider: Any) -> list[tuple[str, Any, Mapping[str, Any]]]:
    """(id, model, session kwargs): the kit model (cpu fallback allowed) and the fused chains
    generated from the ops the provider claims (no fallback: the provider runs them whole)."""
    return [("kit", kit_model(), {}),
            *((case.id, case.model(), {"disable_fallback": True}) for case in chain_cases(aot_provider))]


@pytest.fixture(scope="module")
def exports(aot_provider: Any, aot_models: Any, epoxy_provider_name: str,
            epoxy_provider_options: Mapping[str, str]) -> Exports:
    return export_groups(aot_models, lambda model, kwargs: kit_session(model, epoxy_provider_name,
                                                                       epoxy_provider_options, **kwargs))


def _require_groups(exports: Exports) -> None:
    assert not exports.problems, "export_compiled failed:\n" + "\n".join(exports.problems)
    if not exports.groups:
        if exports.declined:
            pytest.skip(f"export_compiled returned None for each of the {exports.declined} groups the provider "
                        "compiled for the kit's models: no blob to test")
        pytest.skip("the provider compiled no groups for the kit's models (it proposes no fused groups for "
                    f"them; {SMALL_GROUPS}): nothing to export")


def _inputs(model: Any) -> list[dict[str, np.ndarray]]:
    """Two feeds for the kit's models (one float32 input ``x`` of static shape)."""
    (value,) = model.graph.input
    shape = tuple(d.dim_value for d in value.type.tensor_type.shape.dim)
    size = int(np.prod(shape))
    noise = np.random.default_rng(0).standard_normal(size).astype(np.float32) * 3
    return [{value.name: np.linspace(-2, 2, size, dtype=np.float32).reshape(shape)},
            {value.name: noise.reshape(shape)}]


def _identical(got: list[Any], want: list[Any]) -> str | None:
    """Why ``got`` is not bit for bit ``want`` (``None`` when it is)."""
    if len(got) != len(want):
        return f"{len(got)} outputs, a fresh session gives {len(want)}"
    for i, (g, w) in enumerate(zip(got, want)):
        if g.dtype != w.dtype or g.shape != w.shape:
            return f"output {i}: {g.dtype}{g.shape}, a fresh session gives {w.dtype}{w.shape}"
        if not np.array_equal(g, w, equal_nan=True):
            differ = np.flatnonzero((g != w) & ~(np.isnan(g) & np.isnan(w)))
            first = differ[0]
            return (f"output {i}: {differ.size} of {g.size} values differ from a fresh session's "
                    f"(first at flat index {first}: {g.ravel()[first]!r} vs {w.ravel()[first]!r})")
    return None


@dataclasses.dataclass(frozen=True)
class CompiledCase:
    """A kit model written by ``epoxy.compile_model``: its groups' labels and the output path."""

    id: str
    model: Any
    kwargs: Mapping[str, Any]
    path: Path
    labels: tuple[str, ...]


@pytest.fixture(scope="module")
def compiled_models(aot_provider: Any, aot_models: Any, epoxy_provider_name: str,
                    epoxy_provider_options: Mapping[str, str], tmp_path_factory: pytest.TempPathFactory,
                    ) -> tuple[list[CompiledCase], list[str]]:
    """Each kit model compiled (blobs embedded); the problems ``compile_model`` reported."""
    import epoxy

    folder = tmp_path_factory.mktemp("aot_models")
    cases, problems = [], []
    for index, (model_id, model, kwargs) in enumerate(aot_models):
        out = folder / f"model{index}.compiled.onnx"
        try:
            summary = epoxy.compile_model(model, out, providers=[epoxy_provider_name],
                                          provider_options=[dict(epoxy_provider_options)],
                                          sess_options=session_options(**kwargs))
        except epoxy.UnsupportedOpError:
            continue
        problems += [f"{model_id}/{g['label']}: {g['reason']}" for g in summary.kept
                     if "export_compiled raised" in g["reason"]]
        if summary.groups:
            cases.append(CompiledCase(model_id, model, kwargs, out, tuple(g["label"] for g in summary.groups)))
    return cases, problems


def _load(case: CompiledCase, name: str, options: Mapping[str, str]) -> tuple[Any, list[str]]:
    import epoxy

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        session = epoxy.InferenceSession(str(case.path), session_options(**case.kwargs), [name], [dict(options)])
    return session, [str(w.message) for w in caught]


def _require_compiled(compiled_models: tuple[list[CompiledCase], list[str]]) -> list[CompiledCase]:
    cases, problems = compiled_models
    assert not problems, "epoxy.compile_model: export_compiled failed:\n" + "\n".join(problems)
    if not cases:
        pytest.skip("epoxy.compile_model wrote no compiled group for the kit's models (the provider compiled "
                    f"none, or export_compiled returned None for each; {SMALL_GROUPS})")
    return cases


def test_aot_methods_come_in_pairs_and_declare_sdk_api_1_2(epoxy_provider_entry, aot_provider):
    importer = getattr(aot_provider, "import_compiled", None)
    assert callable(importer), "the provider has export_compiled but no import_compiled: its blobs cannot be loaded"
    declared = epoxy_provider_entry.factory.sdk_api
    assert parse(declared) >= (1, 2), (
        f"the factory declares sdk_api {declared!r}; export_compiled/import_compiled are SDK API 1.2: declare "
        "'1.2' (a core older than 1.2 lacks epoxy.errors.ArtifactRefused and never calls them)")


def test_exported_artifacts_are_well_formed(exports):
    _require_groups(exports)
    problems = [f"{g.label}: {p}" for g in exports.groups for p in artifact_problems(g.artifact)]
    assert not problems, "\n".join(problems)


def test_compiled_model_loads_its_blobs_and_matches_a_fresh_session(compiled_models, epoxy_provider_name,
                                                                     epoxy_provider_options):
    """``epoxy.compile_model`` then a session on its output: the partition report says each
    group's blob was loaded (``import_compiled``, not ``compile``), the placement is a fresh
    session's, and the outputs are bit for bit a fresh session's, on two inputs."""
    failures = []
    for case in _require_compiled(compiled_models):
        try:
            loaded, caught = _load(case, epoxy_provider_name, epoxy_provider_options)
        except Exception as exc:  # noqa: BLE001 - every model is reported, then the test fails
            failures.append(f"{case.id}: loading the compiled model raised {type(exc).__name__}: {exc}")
            continue
        report = loaded.partition_report()
        not_loaded = {label: report.artifacts.get(label, "never handed to the provider") for label in case.labels
                      if not report.artifacts.get(label, "").startswith(LOADED)}
        if not_loaded:
            failures.append(f"{case.id}: blob not used: {not_loaded} (warnings: {caught})")
            continue
        fresh = kit_session(case.model, epoxy_provider_name, epoxy_provider_options, **case.kwargs)
        if report.summary() != fresh.partition_report().summary():
            failures.append(f"{case.id}: nodes per provider {report.summary()}, a fresh session "
                            f"{fresh.partition_report().summary()}")
        for k, feed in enumerate(_inputs(case.model)):
            why = _identical(loaded.run(None, feed), fresh.run(None, feed))
            if why:
                failures.append(f"{case.id}, input {k}: {why}")
    assert not failures, f"{len(failures)} compiled model(s) failed:\n" + "\n".join(failures)


def test_blob_signed_by_another_key_is_refused_or_identical(compiled_models, epoxy_provider_name,
                                                            epoxy_provider_options, tmp_path, monkeypatch):
    """Loaded with another user's key the blobs are untrusted: a provider whose blob is
    machine code refuses them (``ArtifactRefused``); one whose blob is data may use them, and
    then computes what a fresh session computes. Any other exception fails."""
    case = _require_compiled(compiled_models)[0]
    monkeypatch.setenv("EPOXY_COMPILE_KEY", str(tmp_path / "another_user.key"))
    loaded, caught = _load(case, epoxy_provider_name, epoxy_provider_options)
    statuses = loaded.partition_report().artifacts
    refused = f"compiled again: {epoxy_provider_name} refused the blob"
    for label in case.labels:
        status = statuses.get(label, "never handed to the provider")
        assert status.startswith((LOADED, refused)), (
            f"{case.id}/{label}: an untrusted blob must be refused with ArtifactRefused or used: {status}")
        if status.startswith(LOADED):
            assert "not signed by this user's key" in status, status
    fresh = kit_session(case.model, epoxy_provider_name, epoxy_provider_options, **case.kwargs)
    for feed in _inputs(case.model):
        why = _identical(loaded.run(None, feed), fresh.run(None, feed))
        assert why is None, f"{case.id}: {why} (statuses: {statuses})"


def test_intact_blob_is_imported(exports, aot_provider):
    """``import_compiled`` called directly with each blob the provider exported (marked trusted,
    as a signed model's are) returns a kernel: the refusals below are only meaningful then."""
    _require_groups(exports)
    failures = []
    for group in exports.groups:
        try:
            kernel = aot_provider.import_compiled(group.subgraph, dataclasses.replace(group.artifact, trusted=True))
        except Exception as exc:  # noqa: BLE001 - reported per group
            failures.append(f"{group.label}: {type(exc).__name__}: {exc}")
            continue
        if not callable(kernel):
            failures.append(f"{group.label}: import_compiled returned {type(kernel).__name__}, not a kernel")
    assert not failures, "import_compiled failed on the provider's own blobs:\n" + "\n".join(failures)


@pytest.mark.parametrize("damage", DAMAGES, ids=[d.id for d in DAMAGES])
def test_unfit_blob_is_refused(exports, aot_provider, damage: Damage):
    """``import_compiled`` with a damaged or foreign artifact raises ``ArtifactRefused`` with a
    reason: not another exception, and never a kernel made from bytes it should not trust.
    Altered bytes come untrusted (as the core hands them over: their signature fails), whole
    blobs recorded for another format, target or options come trusted (``aot_cases``)."""
    _require_groups(exports)
    failures = []
    for group in exports.groups:
        artifact = damage.make(group.artifact)
        try:
            kernel = aot_provider.import_compiled(group.subgraph, artifact)
        except ArtifactRefused as exc:
            if not str(exc).strip():
                failures.append(f"{group.label}: ArtifactRefused without a reason (the partition report shows it)")
        except Exception as exc:  # noqa: BLE001 - the wrong exception type is the failure
            failures.append(f"{group.label}: raised {type(exc).__name__} ({exc}) instead of "
                            "epoxy.errors.ArtifactRefused")
        else:
            failures.append(f"{group.label}: accepted it (returned {type(kernel).__name__}) instead of raising "
                            "epoxy.errors.ArtifactRefused")
    assert not failures, f"import_compiled given {damage.what}:\n" + "\n".join(failures)
