"""``epoxy compile``: an ordinary session built while recording what providers compile, then
the compiled model written (:mod:`epoxy.aot.writer`)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..errors import InvalidArgumentError
from .capture import Progress, capturing
from .writer import CompileSummary, write_compiled


def compile_model(model: Any, output: str | Path, *, providers: Sequence[Any] | None = None,
                  provider_options: Any = None, sess_options: Any = None, embed: bool | None = None,
                  progress: Progress | None = None, registry: Any = None) -> CompileSummary:
    """Compile ``model`` for ``providers`` and write the compiled model to ``output``
    (``embed``: blobs inside the model; False: one side file per group beside it; None, the
    default: embedded up to 16 MiB of blobs in all, side files past that)."""
    from ..session import InferenceSession  # the session imports this package's reader

    out = Path(output)
    if isinstance(model, (str, Path)) and Path(model).resolve() == out.resolve():
        raise InvalidArgumentError(f"compile: the output {str(out)!r} would overwrite the model it compiles")
    started = time.perf_counter()
    with capturing(progress) as capture:
        session = InferenceSession(model, sess_options, providers, provider_options, registry=registry)
    summary = write_compiled(session, capture.groups, out, embed=embed)
    summary.seconds = time.perf_counter() - started
    return summary
