"""Provider options: validated once at ``create``, turned into OpenVINO compile properties.

:data:`OPTIONS` (name -> one-line help) is the one table of them: ``parse_options`` rejects
every other name and ``OpenVINOProviderFactory.options()`` returns it (``epoxy providers``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from epoxy.errors import InvalidArgumentError

HINTS = ("LATENCY", "THROUGHPUT", "CUMULATIVE_THROUGHPUT")
PRECISIONS = {"f32": "f32", "fp32": "f32", "f16": "f16", "fp16": "f16", "bf16": "bf16", "default": None}
DEFAULT_MIN_GROUP_COST = 30.0
ENV_MIN_GROUP_COST = "EPOXY_OPENVINO_MIN_GROUP_COST"
_PRECISION_NAMES = " | ".join(k for k, v in PRECISIONS.items() if v in (k, None))  # without aliases


@dataclass(frozen=True)
class OpenVINOOptions:
    """Validated options; :data:`OPTIONS` says what each one means."""

    device: str | None = None
    performance_hint: str = "LATENCY"
    num_threads: int = 0
    num_streams: int | None = None
    precision: str | None = "f32"
    cache_dir: str | None = None
    min_group_cost: float = DEFAULT_MIN_GROUP_COST
    float16: bool = False
    config: Mapping[str, Any] = field(default_factory=dict)

    def compile_config(self) -> dict[str, Any]:
        """Properties for ``Core.compile_model``."""
        cfg: dict[str, Any] = {"PERFORMANCE_HINT": self.performance_hint}
        if self.num_threads:
            cfg["INFERENCE_NUM_THREADS"] = self.num_threads
        if self.num_streams is not None:
            cfg["NUM_STREAMS"] = self.num_streams
        elif self.performance_hint == "LATENCY":
            cfg["NUM_STREAMS"] = 1
        if self.precision is not None:
            cfg["INFERENCE_PRECISION_HINT"] = self.precision
        if self.cache_dir:
            cfg["CACHE_DIR"] = self.cache_dir
        cfg.update(self.config)
        return cfg


_D = OpenVINOOptions()
#: option name -> one-line help: the allowed values and the default.
OPTIONS: dict[str, str] = {
    "device": "OpenVINO device string: CPU, GPU.1, NPU, AUTO, HETERO:GPU,CPU... "
              "(default: the epoxy device chosen by device_index)",
    "performance_hint": f"{' | '.join(HINTS)} (default {_D.performance_hint})",
    "num_threads": f"INFERENCE_NUM_THREADS, int >= 0 (default {_D.num_threads}: OpenVINO decides)",
    "num_streams": "NUM_STREAMS, int >= 0 (default: 1 with the LATENCY hint, else OpenVINO's choice)",
    "precision": f"INFERENCE_PRECISION_HINT: {_PRECISION_NAMES} (default {_D.precision}: exact results on every CPU; "
                 "'default' = what the device prefers)",
    "cache_dir": "CACHE_DIR: directory where compiled blobs are stored and loaded by later sessions (default: none)",
    "min_group_cost": f"estimated cpu microseconds a group must save to be worth one OpenVINO call, number >= 0 "
                      f"(default {_D.min_group_cost:g} or ${ENV_MIN_GROUP_COST}; 0 claims every group)",
    "float16": "True | False: also run float16 tensors, computed in float32 and rounded once "
               f"(may differ from ONNX's float16 steps by 1 ulp) (default {_D.float16})",
    "config": 'extra OpenVINO properties passed as they are, e.g. {"ENABLE_CPU_PINNING": False} (default {})',
}
KNOWN_OPTIONS = tuple(OPTIONS)


def _bad(message: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"openvino provider: {message}")


def _int(name: str, value: Any, *, allow_none: bool = False) -> int | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _bad(f"option {name!r} must be an int >= 0, got {value!r}")
    return value


def parse_options(options: Mapping[str, Any]) -> OpenVINOOptions:
    """Validate user options; unknown names or bad values raise ``InvalidArgumentError``."""
    unknown = sorted(set(options) - set(KNOWN_OPTIONS))
    if unknown:
        raise _bad(f"unknown options {unknown}; known options: {list(KNOWN_OPTIONS)}")
    kwargs: dict[str, Any] = {}
    if "device" in options and options["device"] is not None:
        device = options["device"]
        if not isinstance(device, str) or not device.strip():
            raise _bad(f"option 'device' must be an OpenVINO device string like 'CPU', got {device!r}")
        kwargs["device"] = device.strip()
    if "performance_hint" in options:
        hint = options["performance_hint"]
        if not isinstance(hint, str) or hint.upper() not in HINTS:
            raise _bad(f"option 'performance_hint' must be one of {list(HINTS)}, got {hint!r}")
        kwargs["performance_hint"] = hint.upper()
    if "num_threads" in options:
        kwargs["num_threads"] = _int("num_threads", options["num_threads"])
    if "num_streams" in options:
        kwargs["num_streams"] = _int("num_streams", options["num_streams"], allow_none=True)
    if "precision" in options:
        p = options["precision"]
        if not isinstance(p, str) or p.lower() not in PRECISIONS:
            raise _bad(f"option 'precision' must be one of {sorted(PRECISIONS)}, got {p!r}")
        kwargs["precision"] = PRECISIONS[p.lower()]
    if "cache_dir" in options and options["cache_dir"] is not None:
        d = options["cache_dir"]
        if not isinstance(d, (str, os.PathLike)) or not str(d):
            raise _bad(f"option 'cache_dir' must be a directory path, got {d!r}")
        kwargs["cache_dir"] = os.fspath(d)
    cost = options.get("min_group_cost")
    if cost is None:
        env = os.environ.get(ENV_MIN_GROUP_COST)
        if env:
            try:
                cost = float(env)
            except ValueError:
                raise _bad(f"{ENV_MIN_GROUP_COST} must be a number, got {env!r}") from None
    if cost is not None:
        if isinstance(cost, bool) or not isinstance(cost, (int, float)) or cost < 0:
            raise _bad(f"option 'min_group_cost' must be a number >= 0, got {cost!r}")
        kwargs["min_group_cost"] = float(cost)
    if "float16" in options:
        if not isinstance(options["float16"], bool):
            raise _bad(f"option 'float16' must be True or False, got {options['float16']!r}")
        kwargs["float16"] = options["float16"]
    if "config" in options:
        cfg = options["config"]
        if not isinstance(cfg, Mapping) or not all(isinstance(k, str) for k in cfg):
            raise _bad(f"option 'config' must be a mapping of OpenVINO property names to values, got {cfg!r}")
        kwargs["config"] = dict(cfg)
    return OpenVINOOptions(**kwargs)
