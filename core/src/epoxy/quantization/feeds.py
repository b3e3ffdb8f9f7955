"""Calibration inputs: one feed dict per batch, from a data reader, an iterable or a folder.

Everything becomes an iterator of ``{input name: numpy array}``, read lazily so a large
calibration set is never held in memory at once. Errors name the file, the batch and the
input, because a calibration set is usually written by a separate script and the user must
find which file is wrong.
"""

from __future__ import annotations

import re
import zipfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from epoxy.quantization.errors import CalibrationDataError

Feed = dict[str, np.ndarray]

_INDEXED = re.compile(r"^(?P<input>.+)_(?P<k>\d+)$")


@runtime_checkable
class CalibrationDataReader(Protocol):
    """onnxruntime's reader: ``get_next()`` returns the next feed dict, or None when done."""

    def get_next(self) -> Mapping[str, Any] | None: ...


def iter_feeds(source: Any, input_names: Sequence[str] | None = None) -> Iterator[Feed]:
    """Feed dicts from ``source``: a :class:`CalibrationDataReader`, a folder (str or Path) of
    ``.npz``/``.npy`` files, one feed dict (one batch), or any iterable of feed dicts.

    ``input_names`` (the model's inputs) settles which ``.npy`` names carry a batch index.
    """
    if isinstance(source, CalibrationDataReader) and not isinstance(source, Mapping):
        return _checked(_from_reader(source))
    if isinstance(source, (str, Path)):
        return folder_feeds(source, input_names)
    if isinstance(source, Mapping):
        return _checked(iter([source]))
    if isinstance(source, Iterable):
        return _checked(iter(source))
    raise CalibrationDataError(
        f"calibration data must be a CalibrationDataReader (get_next()), a folder of .npz/.npy files or an "
        f"iterable of feed dicts, got {type(source).__name__}")


def _from_reader(reader: CalibrationDataReader) -> Iterator[Any]:
    while (feed := reader.get_next()) is not None:
        yield feed


def _checked(feeds: Iterator[Any]) -> Iterator[Feed]:
    """Each item a mapping of str to array-likes, as numpy arrays."""
    for k, feed in enumerate(feeds):
        where = f"batch {k}"
        if not isinstance(feed, Mapping):
            raise CalibrationDataError(f"{where}: a feed must be a dict of input name to array, got "
                                       f"{type(feed).__name__}", source=where)
        yield {name: _array(value, where, name) for name, value in feed.items()}


def _array(value: Any, where: str, name: Any) -> np.ndarray:
    if not isinstance(name, str):
        raise CalibrationDataError(f"{where}: input names must be strings, got {name!r}", source=where)
    try:
        array = np.asarray(value)
    except Exception as exc:  # ragged lists and the like
        raise CalibrationDataError(f"{where}: input {name!r} is not an array: {exc}", source=where,
                                   input=name) from exc
    if array.dtype == object:
        raise CalibrationDataError(f"{where}: input {name!r} is not a numeric array (dtype object)",
                                   source=where, input=name)
    return array


def folder_feeds(folder: str | Path, input_names: Sequence[str] | None = None) -> Iterator[Feed]:
    """Feeds from a folder: ``.npz`` files (one feed dict each, in name order) or ``.npy`` files
    named ``<input>.npy`` (one batch) or ``<input>_<k>.npy`` (batch ``k``).

    With ``.npy`` files, an input given once without an index is repeated in every batch (an
    attention mask, say); every indexed input must have the same batch indices. The files are
    checked before the first batch is read, and read one batch at a time.
    """
    path = Path(folder)
    if not path.is_dir():
        raise CalibrationDataError(f"calibration folder {str(path)!r} does not exist or is not a folder",
                                   source=str(path))
    npz = sorted(p for p in path.iterdir() if p.suffix == ".npz")
    npy = sorted(p for p in path.iterdir() if p.suffix == ".npy")
    if npz and npy:
        raise CalibrationDataError(f"calibration folder {str(path)!r} mixes .npz and .npy files: use one kind",
                                   source=str(path))
    if npz:
        return (_load_npz(p) for p in npz)
    if npy:
        return _npy_batches(npy, input_names)
    raise CalibrationDataError(f"calibration folder {str(path)!r} holds no .npz or .npy files", source=str(path))


def _load_npz(path: Path) -> Feed:
    try:
        with np.load(path, allow_pickle=False) as archive:
            return {name: archive[name] for name in archive.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise CalibrationDataError(f"{path}: cannot read it as .npz: {exc}", source=str(path)) from exc


def _load_npy(path: Path, name: str) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise CalibrationDataError(f"{path}: cannot read input {name!r} from it: {exc}", source=str(path),
                                   input=name) from exc


def _split(stem: str, input_names: Sequence[str] | None, path: Path) -> tuple[str, int | None]:
    """``(input, batch index or None)`` of a .npy file name."""
    match = _INDEXED.match(stem)
    if input_names is None:
        return (match["input"], int(match["k"])) if match else (stem, None)
    if stem in input_names:  # "input_1.npy" is the input "input_1" when the model has one
        return stem, None
    if match and match["input"] in input_names:
        return match["input"], int(match["k"])
    raise CalibrationDataError(f"{path}: names no model input (expected <input>.npy or <input>_<k>.npy, "
                               f"inputs: {', '.join(input_names)})", source=str(path))


def _npy_batches(files: list[Path], input_names: Sequence[str] | None) -> Iterator[Feed]:
    once: dict[str, Path] = {}
    indexed: dict[str, dict[int, Path]] = {}
    for path in files:
        name, k = _split(path.stem, input_names, path)
        if k is None:
            once[name] = path
        else:
            indexed.setdefault(name, {})[k] = path
    for name in sorted(set(once) & set(indexed)):
        raise CalibrationDataError(f"input {name!r} has both {once[name].name} and indexed files "
                                   f"({name}_<k>.npy): keep one form", source=str(once[name]), input=name)
    batches: list[int | None] = [None]
    if indexed:
        batches = list(sorted({k for ks in indexed.values() for k in ks}))
    for name, ks in sorted(indexed.items()):
        missing = [k for k in batches if k not in ks]
        if missing:
            raise CalibrationDataError(f"input {name!r} has no file for batch {missing[0]} "
                                       f"({name}_{missing[0]}.npy) though other inputs do", input=name,
                                       source=f"batch {missing[0]}")
    return _read_npy(batches, once, indexed)


def _read_npy(batches: list[int | None], once: dict[str, Path], indexed: dict[str, dict[int, Path]]) -> Iterator[Feed]:
    fixed = {name: _load_npy(path, name) for name, path in once.items()}
    for k in batches:
        feed = dict(fixed)
        if k is not None:
            feed.update({name: _load_npy(ks[k], name) for name, ks in indexed.items()})
        yield feed
