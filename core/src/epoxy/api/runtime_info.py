"""Module-level functions onnxruntime code calls: what this build is and runs on, logging,
and the seed of random ops."""

from __future__ import annotations

import logging

from ..kit.random import set_seed as _set_kernel_seed
from ..plugins import default_registry
from ..sdk_api import SDK_API
from ..version import __version__

#: epoxy's logger; sessions log their creation notes under ``epoxy.session``
LOGGER = logging.getLogger("epoxy")

#: onnxruntime severities (0 verbose .. 4 fatal) -> logging levels
_SEVERITY_LEVELS = {0: logging.DEBUG, 1: logging.INFO, 2: logging.WARNING, 3: logging.ERROR, 4: logging.CRITICAL}
_verbosity = 0


def get_device() -> str:
    """``"GPU"`` when an available provider drives a GPU here, else ``"CPU"`` (onnxruntime
    answers with the device its build targets; epoxy answers with what its plugins found)."""
    for entry in default_registry().entries():
        if entry.available and any(d.kind == "gpu" for d in entry.devices()):
            return "GPU"
    return "CPU"


def get_version_string() -> str:
    """epoxy-core's version."""
    return __version__


def get_build_info() -> str:
    """One line: the core's version and SDK API, then each installed provider's package."""
    parts = [f"epoxy-core {__version__}", f"SDK API {SDK_API}"]
    for entry in default_registry().entries():
        package = f"{entry.distribution} {entry.distribution_version}" if entry.distribution else "unpackaged"
        parts.append(f"{entry.name}={package}")
    return ", ".join(parts)


def set_default_logger_severity(severity: int) -> None:
    """Minimum severity epoxy logs, onnxruntime's scale: 0 verbose, 1 info, 2 warning (the
    default), 3 error, 4 fatal. Sets the ``epoxy`` logger's level (Python ``logging``)."""
    if isinstance(severity, bool) or severity not in _SEVERITY_LEVELS:
        raise ValueError(f"severity must be an int from 0 (verbose) to 4 (fatal), got {severity!r}")
    LOGGER.setLevel(_SEVERITY_LEVELS[severity])


def set_default_logger_verbosity(verbosity: int) -> None:
    """Verbose-log detail (onnxruntime's VLOG level); with severity 0, any level > 0 logs
    per-run details (epoxy has one detail level)."""
    global _verbosity
    if isinstance(verbosity, bool) or not isinstance(verbosity, int) or verbosity < 0:
        raise ValueError(f"verbosity must be an int >= 0, got {verbosity!r}")
    _verbosity = verbosity


def set_seed(seed: int) -> None:
    """Seed the random ops that have no ``seed`` attribute (RandomNormal, RandomUniform,
    Bernoulli, Multinomial, training-mode Dropout) on every provider using ``epoxy.kit.random``."""
    _set_kernel_seed(seed)


def session_logger(logid: str, severity: int) -> logging.Logger:
    """The logger a session (or run) writes to: ``epoxy.session[.<logid>]``; a
    ``log_severity_level`` other than -1 sets its own level (onnxruntime's per-session level)."""
    logger = LOGGER.getChild("session" + (f".{logid}" if logid else ""))
    if severity != -1:
        logger.setLevel(_SEVERITY_LEVELS[severity])
    return logger
