"""Outcome classes of a case and the cause signature the triage groups them by.

=========  ====================================================================================
ok         the session was created and ran (or was created, where no feeds could be built)
error      the runtime's own exception type (``epoxy.EpoxyError``; onnxruntime's exceptions)
foreign    any other exception type
crash      the worker died (signal, abort, exit) for a reason other than memory
hang       no answer within the per-case timeout (the worker's Python stacks are dumped first)
oom        ``MemoryError`` anywhere in the exception's chain (also wrapped in the runtime's own
           error), the worker aborting on ``std::bad_alloc``, or killed by SIGKILL, which
           the harness never sends but the kernel's OOM killer does
escape     the run worked although external data pointed outside the model's folder (a bait
           file held the bytes expected there)
=========  ====================================================================================
"""

from __future__ import annotations

import re
import signal
import traceback

OUTCOMES = ("ok", "error", "foreign", "crash", "hang", "oom", "escape")
FAILURES = frozenset({"foreign", "crash", "hang", "oom", "escape"})
MEMORY_WORDS = ("MemoryError", "bad_alloc", "Cannot allocate memory", "out of memory", "Unable to allocate")


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _where(frames: list[tuple[str, str]]) -> str:
    """Where something happened, from frames innermost first: the innermost frame of epoxy's
    own code (core or a provider), then the innermost frame if that is elsewhere (numpy, onnx)."""
    if not frames:
        return "?"
    names = [f"{path.rsplit('/', 1)[-1]}:{func}" for path, func in frames]
    own = next((n for (path, _), n in zip(frames, names) if "epoxy" in path and "/tests/fuzz/" not in path), None)
    if own is None or own == names[0]:
        return names[0]
    return f"{own} > {names[0]}"


def _innermost(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    return _where([(f.filename, f.name) for f in reversed(frames)])


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:300] if text else ''}"


def classify_exception(exc: BaseException, own: bool) -> tuple[str, str]:
    """(outcome, detail) of an exception a runtime raised; ``own``: its type is the runtime's."""
    chain = _chain(exc)
    memory = next((e for e in chain if isinstance(e, MemoryError)), None)
    if memory is not None:
        wrapped = "" if memory is exc else f" (raised as {type(exc).__name__})"
        return "oom", f"{first_line(memory)}{wrapped}\nat {_innermost(memory)}"
    if own:
        return "error", first_line(exc)
    trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return "foreign", f"{first_line(exc)}\nat {_innermost(exc)}\n{trace[-4000:]}"


def classify_death(returncode: int, stderr: str) -> tuple[str, str]:
    """(outcome, detail) of a worker that exited while running a case."""
    if returncode < 0:
        try:
            how = signal.Signals(-returncode).name
        except ValueError:
            how = f"signal {-returncode}"
    else:
        how = f"exit code {returncode}"
    where = first_frame(stderr)
    memory = any(word in stderr for word in MEMORY_WORDS)
    outcome = "oom" if memory or returncode == -signal.SIGKILL else "crash"
    return outcome, f"worker died: {how}\nat {where}\n{stderr[-3000:]}"


_FRAME = re.compile(r'File "([^"]+)", line \d+ in (\S+)')


def first_frame(dump: str) -> str:
    """Where the thread that was dumped (faulthandler's "Current thread", else the first one
    listed) was: faulthandler lists the most recent call first."""
    start = dump.find("Current thread")
    block = dump[start:] if start >= 0 else dump
    end = block.find("\n\n")
    block = block[: end if end > 0 else None]
    return _where(_FRAME.findall(block))


_NORMALIZE = [
    (re.compile(r"'[^']*'|\"[^\"]*\""), "'…'"),
    (re.compile(r"(?<![\w.])/[^\s:,)]+"), "PATH"),
    (re.compile(r"0x[0-9a-fA-F]+"), "N"),
    (re.compile(r"(?<![A-Za-z_0-9])-?\d+(\.\d+)?([eE][-+]?\d+)?"), "N"),
    (re.compile(r"\s+"), " "),
]


def normalize(text: str) -> str:
    """A message with its names, paths and numbers blanked, so one cause gives one line."""
    for pattern, repl in _NORMALIZE:
        text = pattern.sub(repl, text)
    return text.strip()[:160]


def signature(outcome: str, detail: str) -> str:
    """What a cause is known by: the normalized first line, and where it happened."""
    lines = detail.splitlines() or [""]
    where = next((line[3:] for line in lines[1:3] if line.startswith("at ")), "")
    head = normalize(lines[0])
    return f"{head} @ {where}" if where and outcome in FAILURES else head
