"""The ONNX backend test suite, run through epoxy and compared like the onnx backend runner.

Comparison is ``onnx.backend.test.runner.Runner.assert_similar_outputs`` (rtol/atol from the
case, dtypes exact) plus: an empty optional equals an empty optional, numpy scalars become
0-d arrays, string arrays compare as object arrays. Random-op cases compare shape and dtype
only, as the onnx runner's own random cases do.
"""

from __future__ import annotations

import glob
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any, cast

import numpy as np
import onnx
from onnx import numpy_helper

KINDS = ("node", "simple", "pytorch-converted", "pytorch-operator", "real")

#: Ops whose outputs are random: compare shape and dtype, not values.
RANDOM_OPS = {"Bernoulli", "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Multinomial"}


@dataclass(frozen=True, eq=False)
class Case:
    name: str
    kind: str
    model_path: str | None
    data_dirs: tuple[str, ...]
    rtol: float
    atol: float
    dummy_model_name: str | None = None  # real (light) cases: inputs generated like the runner
    model: onnx.ModelProto | None = None  # node cases are generated in memory by onnx
    data_sets: Any = None

    def load_model(self) -> onnx.ModelProto:
        # a case without an in-memory model has a model_path
        return self.model if self.model is not None else onnx.load(cast(str, self.model_path))


@cache
def load_cases(kind: str) -> tuple[Case, ...]:
    from onnx.backend.test.loader import load_model_tests

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        raw = load_model_tests(kind=kind)
    cases = []
    root = os.path.dirname(os.path.dirname(onnx.__file__))
    for c in raw:
        if c.model is not None:
            cases.append(Case(c.name, kind, None, (), c.rtol, c.atol, model=c.model, data_sets=c.data_sets))
        elif c.model_dir is not None:
            dirs = tuple(sorted(glob.glob(os.path.join(c.model_dir, "test_data_set*"))))
            cases.append(Case(c.name, kind, os.path.join(c.model_dir, "model.onnx"), dirs, c.rtol, c.atol))
        else:
            path = os.path.join(root, cast(str, c.url))  # a case with neither model nor model_dir has a url
            cases.append(Case(c.name, kind, path, (), c.rtol, c.atol, dummy_model_name=c.model_name))
    return tuple(cases)


def all_cases() -> list[Case]:
    return [c for kind in KINDS for c in load_cases(kind)]


def _read_value(path: str, type_proto: onnx.TypeProto) -> Any:
    with open(path, "rb") as f:
        data = f.read()
    which = type_proto.WhichOneof("value")
    if which == "sequence_type":
        proto = onnx.SequenceProto()
        proto.ParseFromString(data)
        return numpy_helper.to_list(proto)
    if which == "optional_type":
        proto = onnx.OptionalProto()
        proto.ParseFromString(data)
        return numpy_helper.to_optional(proto)
    if which == "map_type":
        proto = onnx.MapProto()
        proto.ParseFromString(data)
        return numpy_helper.to_dict(proto)
    proto = onnx.TensorProto()
    proto.ParseFromString(data)
    return numpy_helper.to_array(proto)


def _from_proto(value: Any) -> Any:
    """In-memory node cases store exotic-dtype tensors as TensorProto: turn them into arrays."""
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, onnx.SequenceProto):
        return numpy_helper.to_list(value)
    if isinstance(value, onnx.OptionalProto):
        return numpy_helper.to_optional(value)
    return value


def load_data(case: Case, model: onnx.ModelProto) -> list[tuple[dict[str, Any], list[Any]]]:
    """(feeds, expected outputs) per data set of a case."""
    sets = []
    if case.data_sets is not None:
        for inputs, outputs in case.data_sets:
            names = [i.name for i in model.graph.input]
            sets.append((dict(zip(names, map(_from_proto, inputs))), [_from_proto(o) for o in outputs]))
        return sets
    if case.dummy_model_name is not None:
        from onnx.backend.test.runner import Runner

        inits = {i.name for i in model.graph.initializer}
        feeds = {}
        for inp in model.graph.input:
            if inp.name in inits:
                continue
            feeds[inp.name] = Runner.generate_dummy_data(inp, seed=0, name=case.dummy_model_name, random=False)
        prefix = os.path.splitext(cast(str, case.model_path))[0]
        expected = [_read_value(f"{prefix}_output_{i}.pb", o.type) for i, o in enumerate(model.graph.output)]
        return [(feeds, expected)]
    for d in case.data_dirs:
        n_in = len(glob.glob(os.path.join(d, "input_*.pb")))
        n_out = len(glob.glob(os.path.join(d, "output_*.pb")))
        feeds = {}
        for i in range(n_in):
            inp = model.graph.input[i]
            feeds[inp.name] = _read_value(os.path.join(d, f"input_{i}.pb"), inp.type)
        expected = [_read_value(os.path.join(d, f"output_{i}.pb"), model.graph.output[i].type) for i in range(n_out)]
        sets.append((feeds, expected))
    return sets


def _normalize(value: Any) -> Any:
    if isinstance(value, np.generic):
        return np.asarray(value)
    if isinstance(value, np.ndarray) and value.dtype.kind in "SU":
        return value.astype(object)
    if isinstance(value, (list, tuple)):
        return [_normalize(v) for v in value]
    return value


def assert_outputs_match(
    expected: list[Any], actual: list[Any], rtol: float, atol: float, *, values: bool = True
) -> None:
    from onnx.backend.test.runner import Runner

    assert len(actual) == len(expected), f"got {len(actual)} outputs, expected {len(expected)}"
    for i, (ref, out) in enumerate(zip(expected, actual)):
        ref, out = _normalize(ref), _normalize(out)
        if ref is None or out is None:
            assert ref is None and out is None, (
                f"output {i}: expected {'empty optional' if ref is None else type(ref).__name__}, "
                f"got {'empty optional' if out is None else type(out).__name__}"
            )
            continue
        if isinstance(ref, list) or isinstance(out, list):
            assert isinstance(ref, list) and isinstance(out, list), (
                f"output {i}: expected {type(ref).__name__}, got {type(out).__name__}")
            assert len(ref) == len(out), f"output {i}: sequence of {len(out)} items, expected {len(ref)}"
            assert_outputs_match(ref, out, rtol, atol, values=values)
            continue
        if not values:
            assert isinstance(out, np.ndarray), f"output {i}: expected an array, got {type(out).__name__}"
            assert out.shape == ref.shape, f"output {i}: shape {out.shape} != {ref.shape}"
            assert out.dtype == ref.dtype, f"output {i}: dtype {out.dtype} != {ref.dtype}"
            continue
        Runner.assert_similar_outputs([ref], [out], rtol=rtol, atol=atol)


def is_random(model: onnx.ModelProto) -> bool:
    return any(n.op_type in RANDOM_OPS for n in model.graph.node)


def run_case(case: Case, providers: list[Any] | None = None, *, disable_fallback: bool = False,
             registry: Any = None, provider_options: Mapping[str, Mapping[str, Any]] | None = None) -> Any:
    """Run one case; raises (AssertionError or an epoxy error) when it does not pass.
    Returns the session's partition report (what ran where). ``provider_options``: options
    per provider name, as sessions take them."""
    import epoxy

    model = case.load_model()
    source = case.model_path if case.model_path is not None else model
    # output checks on: a provider returning the wrong dtype or shape fails here, at its node
    options = epoxy.SessionOptions(disable_fallback=disable_fallback, check_outputs=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        listed: list[Any] = list(providers or ["cpu"])  # names, or (name, options) pairs as sessions take
        if provider_options:
            listed = [(p, dict(provider_options.get(p, {}))) if isinstance(p, str) else p for p in listed]
        session = epoxy.InferenceSession(source, providers=listed, sess_options=options, registry=registry)
    for feeds, expected in load_data(case, model):
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            actual = session.run(None, feeds)
        assert_outputs_match(expected, actual, case.rtol, case.atol, values=not is_random(model))
    return session.partition_report()


def case_ops(case: Case) -> set[str]:
    model = case.model if case.model is not None else onnx.load(cast(str, case.model_path), load_external_data=False)
    return {n.op_type for n in model.graph.node}


def case_op_versions(case: Case) -> list[str]:
    """``Op-version`` of each op a case uses (the schema version its opset resolves to), so a
    report tells Resize-11 from Resize-19."""
    import onnx.defs

    model = case.model if case.model is not None else onnx.load(cast(str, case.model_path), load_external_data=False)
    opsets = {o.domain or "": o.version for o in model.opset_import}
    found = set()
    for node in model.graph.node:
        domain = node.domain or ""
        try:
            version = onnx.defs.get_schema(node.op_type, opsets.get(domain, 1), domain).since_version
            found.add(f"{node.op_type}-{version}")
        except Exception:  # noqa: BLE001 - an op onnx has no schema for: name it bare
            found.add(node.op_type)
    return sorted(found)
