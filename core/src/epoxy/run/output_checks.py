"""Check what each kernel or compiled group returns against the graph's inferred types.

A provider that returns float64 for a float32 output, or a tensor of the wrong rank, makes
every later node compute on the wrong thing; the user sees a wrong answer far from its
cause. With checks on (``SessionOptions(check_outputs=True)``, the config entry
``epoxy.check_outputs``, or ``EPOXY_CHECK_OUTPUTS=1``; always on in the SDK's conformance
kit) each step's outputs are compared with the types shape inference gave them: the dtype
always, the rank and every known dim when inference knows them. The first mismatch is an
:class:`~epoxy.errors.OutputTypeError` naming the node, provider, output, expected and got.

The checks wrap step callables, so they work under every executor (sequential, parallel,
profiled) and cost one attribute read and a tuple compare per output (``bench/output_checks.py``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..contract import OUT_PARTS, ValueType
from ..errors import OutputTypeError
from .executor import ExecutionPlan, Step

ENV_CHECK_OUTPUTS = "EPOXY_CHECK_OUTPUTS"


def checks_requested(option: bool) -> bool:
    """The session option, or ``EPOXY_CHECK_OUTPUTS=1`` in the environment."""
    return option or os.environ.get(ENV_CHECK_OUTPUTS, "").strip().lower() in ("1", "true", "yes", "on")


@dataclass(frozen=True)
class Expected:
    """What one output must look like; ``None`` fields are not checked."""

    name: str
    dtype: np.dtype | None
    shape: tuple[int | str | None, ...] | None

    def describe(self) -> str:
        dtype = "?" if self.dtype is None else _dtype_name(self.dtype)
        if self.shape is None:
            return f"{dtype}[any rank]"
        return f"{dtype}[{','.join('?' if d is None else str(d) for d in self.shape)}]"


def _dtype_name(dtype: np.dtype) -> str:
    return "string" if dtype == np.dtype(object) else str(dtype)


def _describe_value(value: Any) -> str:
    dtype, shape = getattr(value, "dtype", None), getattr(value, "shape", None)
    if dtype is None or shape is None:
        return type(value).__name__
    kind = np.dtype(dtype)
    name = "string" if kind.kind in "OUS" else str(kind)
    return f"{name}[{','.join(str(d) for d in shape)}]"


def expected_of(vt: ValueType, name: str) -> Expected | None:
    """The checkable part of a value's type; ``None`` for non-tensors (sequences, maps,
    optionals) and values inference knows nothing about."""
    if vt.kind != "tensor" or (vt.dtype is None and vt.shape is None):
        return None
    return Expected(name, None if vt.dtype is None else np.dtype(vt.dtype), vt.shape)


def mismatch(value: Any, expected: Expected) -> str | None:
    """Why ``value`` does not fit ``expected``, or ``None`` when it does."""
    dtype, shape = getattr(value, "dtype", None), getattr(value, "shape", None)
    if dtype is None or shape is None:
        return "not a tensor"
    if expected.dtype is not None:
        got = np.dtype(dtype)
        strings = expected.dtype == np.dtype(object)
        if (got.kind not in "OUS") if strings else (got != expected.dtype):
            return "dtype"
    if expected.shape is not None:
        if len(shape) != len(expected.shape):
            return "rank"
        for want, got_dim in zip(expected.shape, shape):
            if isinstance(want, int) and want != got_dim:
                return "shape"
    return None


def _checked(step: Step, expected: tuple[Expected | None, ...]) -> Callable[..., Any]:
    fn = step.fn
    single = len(step.outputs) == 1

    def call(*args: Any, **kwargs: Any) -> Any:
        result = fn(*args, **kwargs)
        values = (result,) if single else result
        if not single and (not isinstance(values, tuple) or len(values) < len(expected)):
            return result  # the executor reports a wrong output count with its own message
        for index, (want, value) in enumerate(zip(expected, values)):
            if want is None or value is None:
                continue
            why = mismatch(value, want)
            if why is not None:
                got = _describe_value(value)
                raise OutputTypeError(
                    f"node {step.label!r} ({step.op_type}) on provider {step.provider!r} returned output {index} "
                    f"({want.name!r}) as {got}; the graph's types say {want.describe()} ({why} differs)",
                    node=step.label, op_type=step.op_type, provider=step.provider, output=want.name,
                    expected=want.describe(), got=got)
        return result

    if getattr(fn, "supports_out", False):
        call.supports_out = True  # type: ignore[attr-defined]
        if getattr(fn, OUT_PARTS, None) is not None:
            setattr(call, OUT_PARTS, getattr(fn, OUT_PARTS))
    return call


def with_output_checks(plan: ExecutionPlan, value_type: Callable[[str], ValueType]) -> ExecutionPlan:
    """``plan`` with every kernel and group step checked (copy steps only move values).

    ``value_type``: the graph's type of a value by name (slot names are ``name@device`` off
    the host: the part before ``@`` is the graph's name)."""
    steps = []
    for step in plan.steps:
        if step.provider == "copy":
            steps.append(step)
            continue
        names = [plan.slot_names[slot].split("@", 1)[0] for slot in step.outputs]
        expected = tuple(None if name.startswith("<") else expected_of(value_type(name), name) for name in names)
        steps.append(step if not any(expected) else replace(step, fn=_checked(step, expected)))
    return replace(plan, steps=steps)
