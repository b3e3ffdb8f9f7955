"""com.microsoft (onnxruntime contrib) string ops: Tokenizer (1), which skl2onnx writes for
every TfidfVectorizer / CountVectorizer.

onnxruntime's patterns are RE2 expressions. Python's ``re`` reads the same syntax for the
common cases; ``_re2_to_python`` rewrites the parts whose meaning differs: RE2's ``\\w \\d
\\s \\b`` are ASCII-only (while ``(?i)`` still folds Unicode case) and its ``$`` matches only
at the very end of the text.
"""

from __future__ import annotations

import re

import numpy as np

from epoxy.contract import NodeSpec
from epoxy.kit import Unsupported

from ..registry import KERNELS
from ._util import as_text as _s

MS = "com.microsoft"

_START, _END = "\x02", "\x03"

_WORD = "0-9A-Za-z_"
_SPACE = "\\t\\n\\f\\r "
_IN_CLASS = {"w": _WORD, "d": "0-9", "s": _SPACE}
_OUTSIDE = {
    "w": f"[{_WORD}]", "W": f"[^{_WORD}]", "d": "[0-9]", "D": "[^0-9]",
    "s": f"[{_SPACE}]", "S": f"[^{_SPACE}]",
    "b": f"(?:(?<=[{_WORD}])(?![{_WORD}])|(?<![{_WORD}])(?=[{_WORD}]))",
    "B": f"(?:(?<=[{_WORD}])(?=[{_WORD}])|(?<![{_WORD}])(?![{_WORD}]))",
    "z": "\\Z",
}


def _re2_to_python(pattern: str) -> str:
    """Rewrite an RE2 pattern so Python's ``re`` matches what RE2 matches."""
    if re.search(r"\(\?[a-zA-Z]*[uLax]", pattern):
        raise ValueError(f"invalid RE2 pattern {pattern!r}: unknown flag group")
    multiline = re.search(r"\(\?[a-zA-Z]*m", pattern) is not None
    out: list[str] = []
    i, in_class, class_start, n = 0, False, False, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\" and i + 1 < n:
            e = pattern[i + 1]
            if in_class and e in _IN_CLASS:
                out.append(_IN_CLASS[e])
            elif in_class and e in "WDS":
                raise Unsupported(f"Tokenizer: negated class \\{e} inside [...] is not supported ({pattern!r})")
            elif not in_class and e in _OUTSIDE:
                out.append(_OUTSIDE[e])
            else:
                out.append(pattern[i:i + 2])
            i += 2
            continue
        if in_class:
            if c == "]" and not class_start:
                in_class = False
            class_start = False
            if c == "[" and pattern.startswith("[:", i):  # POSIX class [:alpha:] and the like
                end = pattern.find(":]", i + 2)
                raise Unsupported(f"Tokenizer: POSIX class {pattern[i:end + 2]} is not supported")
            out.append(c)
        elif c == "[":
            in_class, class_start = True, True
            out.append(c)
            if pattern.startswith("^", i + 1):
                out.append("^")
                i += 1
        elif c == "$" and not multiline:
            out.append("\\Z")
        else:
            out.append(c)
        i += 1
    return "".join(out)


def _compile(pattern: str, what: str) -> re.Pattern[str]:
    try:
        return re.compile(_re2_to_python(pattern))
    except re.error as exc:
        raise ValueError(f"Tokenizer: cannot compile {what} {pattern!r}: {exc}") from exc


def _split(text: str, sep: re.Pattern[str]) -> list[str]:
    """Pieces of ``text`` between separator matches. An empty separator match ends the
    text: the piece before it is kept and the rest is dropped."""
    pieces, pos = [], 0
    while True:
        m = sep.search(text, pos)
        if m is None:
            pieces.append(text[pos:])
            return pieces
        pieces.append(text[pos:m.start()])
        if m.end() == m.start():
            return pieces
        pos = m.end()


@KERNELS.register("Tokenizer", 1, domain=MS)
def tokenizer(node: NodeSpec):
    """Split each string into tokens (by ``separators`` or as the matches of ``tokenexp``),
    drop tokens shorter than ``mincharnum`` characters, optionally wrap each row's tokens in
    the markers 0x02 / 0x03, and pad the rows to the longest with ``pad_value``:
    ``[C] -> [C, T]``, ``[N, C] -> [N, C, T]``."""
    mark = bool(node.attr("mark", 0))
    pad = _s(node.attr("pad_value", ""))
    mincharnum = int(node.attr("mincharnum", 0))
    separators = [_s(v) for v in (node.attr("separators") or ())]
    tokenexp = node.attr("tokenexp")
    tokenexp = None if tokenexp is None else _s(tokenexp)

    if separators:
        if separators == [""]:
            if mincharnum >= 2:
                raise ValueError("Tokenizer: mincharnum is too big for char level tokenization")

            def tokens(text: str) -> list[str]:
                return list(text)
        else:
            sep = _compile("|".join(f"(?:{s})" for s in separators), "separators")

            def tokens(text: str) -> list[str]:
                return _split(text, sep)
    elif tokenexp is not None:
        if not tokenexp:
            raise ValueError("Tokenizer: expecting a non-empty tokenexp")
        exp = _compile(tokenexp, "tokenexp")

        def tokens(text: str) -> list[str]:
            return [m.group(0) for m in exp.finditer(text) if m.end() > m.start()]
    else:
        raise ValueError("Tokenizer: one of the separators or tokenexp attributes is required")

    def run(x: np.ndarray) -> np.ndarray:
        x = np.asarray(x)
        if x.ndim not in (1, 2):
            raise ValueError(f"Tokenizer accepts [C] or [N, C] input, got shape {x.shape}")
        if x.size == 0:
            return np.empty(x.shape[:-1] + (0,), dtype=object)
        rows = []
        for text in x.reshape(-1).tolist():
            text = _s(text) if not isinstance(text, str) else text
            rows.append([t for t in tokens(text) if len(t) >= mincharnum])
        longest = max(len(r) for r in rows)
        if longest == 0:
            return np.empty(x.shape + (0,), dtype=object)
        width = longest + 2 * mark
        out = np.full((len(rows), width), pad, dtype=object)
        for i, row in enumerate(rows):
            if mark:
                row = [_START, *row, _END]
            out[i, :len(row)] = row
        return out.reshape(x.shape + (width,))

    return run
