"""Model loading: path, bytes or ModelProto -> validated, shape-inferred onnx_ir Model.

Every failure becomes a :class:`ModelLoadError` that says what was being loaded and why.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir
from google.protobuf.message import DecodeError

from ..errors import InvalidGraphError, InvalidProtobufError, ModelFileNotFoundError, ModelLoadError
from ..options import CHECK_MODES, check_mode  # noqa: F401 - CHECK_MODES: what load_model(check=...) takes
from ..run.limits import item_size
from .attribute_checks import check_attributes
from .constant_fills import attach_fills
from .early_passes import EarlyAsk, EarlyWork, settled_layout
from .early_passes import apply as apply_early_passes
from .graph_checks import settle_declared_types, vet_model, vet_nodes
from .inference_guard import has_shape_trusting_nodes, hide, restore, reveal_safe, reveal_settled
from .map_types import attach_map_types, model_has_maps, restore_map_types, strip_map_types
from .propagation_sources import propagation_has_no_source
from .proto_tensors import FoundTensor, dense_parts, model_graphs, model_tensors
from .trusted_types import apply_plain_types, take_plain_types
from .utf8_twin import text_is_valid
from .wire import load_mapped

#: model files at least this large are memory mapped (weights are not copied)
MAPPED_FILE_MIN_BYTES = 1 << 20

ModelSource = str | os.PathLike | bytes | onnx.ModelProto


@dataclass
class LoadedModel:
    """The IR model plus what loading learned (warnings are shown, never swallowed)."""

    model: ir.Model
    source: str
    base_dir: Path | None
    warnings: list[str] = field(default_factory=list)
    #: Constant nodes lifted to initializers while loading (``lift_constants``)
    lifted_constants: int = 0
    #: ConstantOfShape nodes folded into initializers while loading (``fold_fills``)
    folded_fills: int = 0
    #: an IR < 4 model's initializers taken out of its inputs while loading (``legacy_inputs``)
    legacy_inputs_dropped: bool = False
    #: initializers the folds left unread, removed while loading (``drop_unread``)
    dropped_initializers: int = 0


def _copy(proto: onnx.ModelProto) -> onnx.ModelProto:
    copied = onnx.ModelProto()
    copied.CopyFrom(proto)
    return copied


def _read_proto(source: ModelSource, file_backed: Callable[[onnx.GraphProto], set[str]] | None = None,
                ) -> tuple[onnx.ModelProto, str, Path | None, dict[str, np.ndarray]]:
    """The protobuf, a display name, the folder external data is relative to, and the
    initializers kept as views of the memory-mapped file (large files only, see wire.py;
    ``file_backed`` names those left uncopied)."""
    if isinstance(source, onnx.ModelProto):
        return source, "<ModelProto>", None, {}
    if isinstance(source, (bytes, bytearray, memoryview)):
        proto = onnx.ModelProto()
        try:
            proto.ParseFromString(bytes(source))
        except (DecodeError, RuntimeError, ValueError) as exc:
            raise InvalidProtobufError(f"model bytes are not a valid ONNX protobuf: {exc}") from exc
        if not proto.graph.node and not proto.graph.output:
            raise ModelLoadError("model bytes parsed to an empty model (no graph outputs)")
        return proto, "<bytes>", None, {}
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        try:
            found = path.is_file()
        except OSError as exc:  # a name longer than the file system allows, a loop of links...
            raise ModelLoadError(f"cannot open the model file {_short(str(path))}: {exc.strerror or exc}") from exc
        if not found:
            raise ModelFileNotFoundError(f"model file not found: {path}")
        try:
            if path.stat().st_size >= MAPPED_FILE_MIN_BYTES:
                proto, mapped = load_mapped(path, file_backed)
                return proto, str(path), path.resolve().parent, mapped
            proto = onnx.load(str(path), load_external_data=False)
        except (DecodeError, RuntimeError, ValueError, OSError) as exc:
            raise InvalidProtobufError(f"cannot parse {path} as an ONNX model: {exc}") from exc
        return proto, str(path), path.resolve().parent, {}
    raise ModelLoadError(
        f"model must be a path, bytes or onnx.ModelProto, got {type(source).__name__}"
    )


def _first_bad_text(message: Any, path: str) -> str | None:
    """Path of the first string field that is not valid UTF-8 (protobuf hands those back
    as ``bytes``, which every name lookup downstream would trip over). A model protobuf is
    asked of its proto3 twin first (:mod:`.utf8_twin`, ~20x faster); the walk below names
    the field when the twin finds one, and runs alone where the twin cannot tell."""
    if isinstance(message, onnx.ModelProto) and text_is_valid(message):
        return None
    trail: list[str] = [path]
    bad = _find_bad_text(message, trail)
    return None if bad is None else f"{''.join(trail)} = {bad[:60]!r}"


def _find_bad_text(message: Any, trail: list[str]) -> bytes | None:
    """The first non-UTF-8 string under ``message``; ``trail`` then holds its path. Field
    kinds are looked up once per field descriptor and paths built only for the bad field:
    this walks every node and attribute of the model at each load."""
    for field_desc, value in message.ListFields():
        kind = _field_kind(field_desc)
        if kind is None:
            continue
        is_string, repeated = kind
        items = value if repeated else (value,)
        for k, item in enumerate(items):
            if is_string:
                if not isinstance(item, str):
                    trail.append(f".{field_desc.name}")
                    return item
                continue
            trail.append(f".{field_desc.name}[{k}]" if repeated else f".{field_desc.name}")
            bad = _find_bad_text(item, trail)
            if bad is not None:
                return bad
            trail.pop()
    return None


_KINDS: dict[Any, tuple[bool, bool] | None] = {}


def _field_kind(field_desc: Any) -> tuple[bool, bool] | None:
    """(is a string, is repeated) for string and message fields, None for the others."""
    kind = _KINDS.get(field_desc, _KINDS)
    if kind is not _KINDS:
        return kind  # type: ignore[return-value]
    from google.protobuf.descriptor import FieldDescriptor

    repeated = getattr(field_desc, "is_repeated", None)
    if repeated is None:  # protobuf < 5.27
        repeated = field_desc.label == FieldDescriptor.LABEL_REPEATED
    if field_desc.type == FieldDescriptor.TYPE_STRING:
        found: tuple[bool, bool] | None = (True, bool(repeated))
    elif field_desc.type == FieldDescriptor.TYPE_MESSAGE:
        found = (False, bool(repeated))
    else:
        found = None
    _KINDS[field_desc] = found
    return found


def _short(text: str, keep: int = 80) -> str:
    """``text`` cut for a message (a hostile location can be thousands of characters)."""
    return repr(text) if len(text) <= keep else f"{text[:keep]!r}... ({len(text):,} characters)"


def _external_entries(tensor: onnx.TensorProto) -> dict[str, str]:
    return {e.key: e.value for e in tensor.external_data}


def _checked_external_path(tensor: onnx.TensorProto, what: str, base_dir: Path, source: str) -> None:
    """Refuse locations outside the model's folder and ranges outside the data file."""
    info = _external_entries(tensor)
    location = info.get("location", "")
    where = f"{source}: {what} external data {_short(location)}"
    if not location:
        raise ModelLoadError(f"{where}: no location given")
    if "\x00" in location:
        raise ModelLoadError(f"{where}: location contains a NUL byte; refused")
    parts = Path(location).parts
    if Path(location).is_absolute() or location.startswith(("/", "\\")) or (parts and ":" in parts[0]):
        raise ModelLoadError(f"{where}: absolute locations are refused; data must sit beside the model")
    try:
        base = base_dir.resolve()
        path = (base / location).resolve()
        if base != path and base not in path.parents:
            raise ModelLoadError(f"{where}: resolves to {path}, outside the model's folder {base}; refused")
        if not path.is_file():
            raise ModelLoadError(f"{where}: file not found at {path}")
        size = path.stat().st_size
    except OSError as exc:  # a name too long for the file system, a loop of links...
        raise ModelLoadError(f"{where}: cannot be opened: {exc.strerror or exc}") from exc
    try:
        offset = int(info.get("offset", 0))
        length = int(info["length"]) if "length" in info else size - offset
    except ValueError as exc:
        raise ModelLoadError(f"{where}: offset/length are not integers") from exc
    if offset < 0 or length < 0 or offset + length > size:
        raise ModelLoadError(f"{where}: bytes [{offset}, {offset + length}) lie outside the {size}-byte file")


def _load_external_data(proto: onnx.ModelProto, base_dir: Path | None, source: str,
                        tensors: Sequence[FoundTensor] | None = None) -> None:
    """Read every tensor's external data (sparse tensors' values and indices, function
    bodies and subgraphs too), each location confined to the model's folder first.
    ``tensors``: the model's, when the caller walked them already."""
    from onnx.external_data_helper import load_external_data_for_tensor, uses_external_data

    found_tensors = model_tensors(proto) if tensors is None else tensors
    external = [(what, tensor) for found in found_tensors for what, tensor in dense_parts(found)
                if uses_external_data(tensor)]
    if not external:
        return
    if base_dir is None:
        raise ModelLoadError(
            f"{source}: model uses external data but was not loaded from a path; "
            "pass the model's file path so its data files can be found"
        )
    for what, tensor in external:
        _checked_external_path(tensor, what, base_dir, source)
    for what, tensor in external:
        location = _external_entries(tensor).get("location", "")
        try:
            load_external_data_for_tensor(tensor, str(base_dir))
        except (OSError, ValueError, onnx.checker.ValidationError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            raise ModelLoadError(f"{source}: {what} external data {_short(location)}: "
                                 f"cannot be read: {reason}") from exc


def _checker_complaint(proto: onnx.ModelProto, source: str, strict: bool) -> str | None:
    """onnx.checker's complaint about ``proto`` on one line, None when it has none; in
    strict mode a complaint is a :class:`ModelLoadError`."""
    try:
        onnx.checker.check_model(proto)
    except onnx.checker.ValidationError as exc:
        if strict:
            raise ModelLoadError(f"{source}: model is not valid ONNX: {exc}") from exc
        return " ".join(str(exc).split()) or type(exc).__name__
    except ValueError as exc:  # models > 2 GiB cannot be checked in memory
        if "2GB" not in str(exc) and "2 GB" not in str(exc):
            raise ModelLoadError(f"{source}: model check failed: {exc}") from exc
    return None


def _refuse_newer_ir(proto: onnx.ModelProto, source: str) -> None:
    if proto.ir_version > onnx.IR_VERSION:
        raise ModelLoadError(
            f"{source}: IR version {proto.ir_version} is newer than this onnx ({onnx.__version__}) reads (up to "
            f"{onnx.IR_VERSION}): parts of the model could mean what epoxy cannot know; refused (onnxruntime refuses "
            "it too; check_model='off' loads it anyway)")


#: onnx's data propagation costs time and memory linear in the length of every 1-D value
#: (a declared [2**31] input takes minutes); above this length it is skipped.
DATA_PROP_MAX_1D = 1 << 16


def _long_1d_value(proto: onnx.ModelProto) -> str | None:
    """Name of a 1-D value (declared or inferred) too long for data propagation, if any."""
    graphs = [proto.graph]
    while graphs:
        graph = graphs.pop()
        for vi in (*graph.input, *graph.output, *graph.value_info):
            dims = vi.type.tensor_type.shape.dim  # empty (a default message) for other types
            if len(dims) == 1 and (dims[0].dim_value > DATA_PROP_MAX_1D or dims[0].dim_value < 0):
                return vi.name
        for init in graph.initializer:
            if len(init.dims) == 1 and init.dims[0] > DATA_PROP_MAX_1D:
                return init.name
        for node in graph.node:
            for attr in node.attribute:
                graphs.extend([attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs)
    return None


def _infer_shapes(view: onnx.ModelProto, source: str, notes: list[str], editable: bool) -> onnx.ModelProto:
    """Shape inference over ``view``; ``editable``: whether ``view`` may be changed (it is
    copied first when it is the caller's proto). Nodes whose inference trusts their input
    dims are hidden from the passes until those dims are seen (:mod:`.inference_guard`), and
    the inferred ranks are checked against the attributes (:mod:`.attribute_checks`)."""
    guarded = has_shape_trusting_nodes(view)
    if not guarded:  # nothing to hide, so nothing to restore (two walks of every node saved)
        return _inferred_or_view(view, source, notes, editable, guarded)
    if not editable:
        view, editable = _copy(view), True
    hide(view)
    try:
        return restore(_inferred_or_view(view, source, notes, editable, guarded))
    finally:
        restore(view)


def _inferred_or_view(view: onnx.ModelProto, source: str, notes: list[str], editable: bool,
                      guarded: bool) -> onnx.ModelProto:
    """The inferred model, or ``view`` itself (with a note) when inference fails."""
    try:
        return _run_inference(view, source, notes, editable, guarded)
    except InvalidGraphError:
        raise
    except Exception as exc:  # inference gaps are not fatal: kernels still see real shapes
        notes.append(f"{source}: shape inference failed, continuing without inferred shapes: {exc}")
        return view


def _run_inference(view: onnx.ModelProto, source: str, notes: list[str], editable: bool,
                   guarded: bool) -> onnx.ModelProto:
    infer = onnx.shape_inference.infer_shapes
    # a first pass without data propagation finds long 1-D values data propagation
    # would crawl through; only when there is none is the full inference run. It is
    # strict so that declarations inference disagrees with are found. Each pass reads
    # the same serialized view (serialized again only when the view changes)
    data = view.SerializeToString()
    try:
        inferred = infer(data, check_type=False, strict_mode=True, data_prop=False)
    except Exception:  # noqa: BLE001 - a declaration inference disagrees with, or an op it cannot infer
        view = _settle_declarations(view, source, notes, editable)
        data = view.SerializeToString()
        inferred = infer(data, check_type=False, strict_mode=False, data_prop=False)
    if not guarded and propagation_has_no_source(inferred):
        pass  # data propagation would learn nothing (nor crawl anything): this run's types are final
    elif (long_value := _long_1d_value(inferred)) is not None:
        notes.append(f"{source}: 1-D value {long_value!r} is longer than {DATA_PROP_MAX_1D}; "
                     "shape inference ran without data propagation")
    else:
        if guarded:
            # hidden nodes whose inputs' shapes this pass knows fully are revealed now; the
            # others see their inputs as the full inference sees them first
            hidden = []
            if reveal_settled(view, inferred):
                hidden = reveal_safe(view, infer(data, check_type=False, strict_mode=False, data_prop=True))
            data = view.SerializeToString()  # revealed nodes are back in their domain
            if hidden:
                notes.append(f"{source}: shape inference skipped node(s) {', '.join(map(repr, hidden))}: their "
                             "input shapes are unknown or have a negative dim, which onnx's inference would "
                             "index with (their outputs' shapes are learned when they run)")
        inferred = infer(data, check_type=False, strict_mode=False, data_prop=True)
    check_attributes(inferred, source, inferred=True)  # the spec's ranges, now that ranks are known
    return inferred


def _settle_declarations(view: onnx.ModelProto, source: str, notes: list[str], editable: bool) -> onnx.ModelProto:
    """Find value_info and output declarations that disagree with what the nodes produce
    (inference over a copy without them) and settle each (graph_checks.settle_declared_types)."""
    graph = view.graph
    if not graph.value_info and not any(o.type.HasField("tensor_type") for o in graph.output):
        return view
    bare = _copy(view)
    del bare.graph.value_info[:]
    for out in bare.graph.output:
        out.ClearField("type")
    try:
        inferred = onnx.shape_inference.infer_shapes(bare, check_type=False, strict_mode=False, data_prop=False)
    except Exception:  # noqa: BLE001 - nothing to compare with
        return view
    if not editable:
        view = _copy(view)
    notes.extend(settle_declared_types(view, source, inferred))
    return view


def _has_sparse(tensors: Iterable[FoundTensor]) -> bool:
    """Whether any of the model's tensors (``model_tensors``: subgraphs and function bodies
    too) is sparse."""
    return any(isinstance(found.tensor, onnx.SparseTensorProto) for found in tensors)


def _dense(sparse: onnx.SparseTensorProto, what: str) -> onnx.TensorProto:
    """The dense tensor a sparse one stands for; its layout checked first (sizes were
    checked against the memory limit before: :func:`~epoxy.run.limits.check_proto_sizes`)."""
    from onnx import numpy_helper

    shape = tuple(sparse.dims)
    try:
        values = numpy_helper.to_array(sparse.values)
        indices = numpy_helper.to_array(sparse.indices).astype(np.int64)
    except Exception as exc:  # noqa: BLE001 - unknown dtype, data that does not fit its dims
        raise InvalidGraphError(f"{what}: values or indices cannot be read: {type(exc).__name__}: {exc}") from exc
    size = int(np.prod(shape, dtype=np.int64))
    problem = None
    if any(d < 0 for d in shape):
        problem = f"negative dims {list(shape)}"
    elif values.ndim != 1:
        problem = f"values must be 1-D, got shape {list(values.shape)}"
    elif indices.ndim == 1 and len(indices) != len(values):
        problem = f"{len(indices)} indices for {len(values)} values"
    elif indices.ndim == 2 and indices.shape != (len(values), len(shape)):
        problem = f"indices of shape {list(indices.shape)} for {len(values)} values of rank {len(shape)}"
    elif indices.ndim not in (1, 2):
        problem = f"indices must be 1-D or 2-D, got shape {list(indices.shape)}"
    elif indices.ndim == 1 and len(indices) and not (0 <= indices.min() and indices.max() < size):
        problem = f"an index lies outside [0, {size})"
    elif indices.ndim == 2 and len(indices) and not ((indices >= 0) & (indices < np.array(shape))).all():
        problem = f"an index lies outside the dims {list(shape)}"
    if problem is not None:
        raise InvalidGraphError(f"{what}: {problem}")
    if indices.ndim == 2:
        indices = np.ravel_multi_index(tuple(indices.T), shape) if len(indices) else indices.reshape(0)
    flat = np.zeros(size, dtype=values.dtype)
    flat[indices] = values
    return numpy_helper.from_array(flat.reshape(shape), sparse.values.name)


def _densify_sparse(proto: onnx.ModelProto, source: str) -> None:
    """onnx_ir cannot hold sparse tensors: turn sparse initializers and Constant
    ``sparse_value`` attributes into dense tensors before building the IR."""
    for graph in model_graphs(proto):
        for sparse in list(graph.sparse_initializer):
            graph.initializer.append(_dense(sparse, f"{source}: sparse initializer {sparse.values.name!r}"))
        del graph.sparse_initializer[:]
    nodes = [n for g in model_graphs(proto) for n in g.node] + [n for f in proto.functions for n in f.node]
    for node in nodes:
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.SPARSE_TENSOR:
                tensor = _dense(attr.sparse_tensor, f"{source}: node {node.name or node.op_type!r} "
                                                    f"attribute {attr.name!r}")
                attr.ClearField("sparse_tensor")
                attr.type = onnx.AttributeProto.TENSOR
                attr.t.CopyFrom(tensor)
                if node.op_type == "Constant" and attr.name == "sparse_value":
                    attr.name = "value"


def load_model(source: ModelSource, *, check: bool | str = "warn", infer_shapes: bool = True,
               memory_limit: int | None = None,
               prepare: Callable[[onnx.ModelProto], None] | None = None,
               compiled: Any = None, trusted: bool = False, lift_constants: bool = False,
               fold_fills: int | None = None, legacy_inputs: bool = False, drop_unread: bool = False
               ) -> LoadedModel:
    """Read, validate and shape-infer a model, returning it as an ``onnx_ir`` model.

    ``check``: ``"warn"`` (default): onnx.checker complaints about a model that is safe to
    run become warnings (``LoadedModel.warnings``), as onnxruntime loads such models; what
    is unsafe or ambiguous to run is refused with the reason (:mod:`epoxy.load.graph_checks`).
    ``"strict"``: any checker complaint is a :class:`ModelLoadError`. ``"off"``: no checker
    (the refusals of unsafe graphs stay). ``True``/``False`` mean ``"strict"``/``"off"``.
    ``memory_limit``: tensors whose declared size is above it are refused before their
    data is read or densified (:class:`~epoxy.errors.ResourceLimitError`).
    ``prepare``: edits the session options ask for, applied to the protobuf first (a
    ``ModelProto`` passed in is copied before ``prepare`` or a repair edits it).
    ``compiled``: an :class:`epoxy.aot.reader.CompiledModelReader`; an epoxy compiled model's
    context nodes are expanded back into their groups' nodes before the checks, and shape
    inference is skipped when it says the graph is typed already.
    ``trusted``: a file epoxy wrote itself from a model that passed every check here (the
    session cache, :mod:`epoxy.aot.session_cache`): the text, checker, graph and attribute
    checks are not repeated; the size and memory-limit checks are.
    ``lift_constants``: Constant nodes become initializers before the graph is built, as the
    optimizer's LiftConstantsPass would make them (:mod:`.constant_nodes`; only in a proto
    loading owns, never the caller's). ``fold_fills``: ConstantOfShape nodes of a constant
    shape of at most this many elements become initializers before the graph is built, as
    the optimizer's ConstantFoldingPass would make them (:mod:`.constant_fills`; the same);
    ``drop_unread``: and the shapes they leave unread are removed, as the dead-node pass would.
    ``legacy_inputs``: an IR < 4 model's initializers stop being graph inputs, as the
    optimizer's LegacyInitializerInputsPass makes them (:mod:`.legacy_inputs`; the same)."""
    mode = "off" if trusted else check_mode(check)
    proto, name, base_dir, mapped = _read_proto(source, None if compiled is None else compiled.file_backed)
    owned = not isinstance(source, onnx.ModelProto)  # whether `proto` may be edited in place
    bad_text = None if trusted else _first_bad_text(proto, "model")
    if bad_text is not None:
        raise ModelLoadError(f"{name}: a name or string field is not valid UTF-8: {bad_text}")
    from ..run.limits import check_declared_ranks, check_proto_data, check_proto_sizes

    # declared sizes before any data is read or densified; then, with all data in, tensors
    # that hold less than their dims say (sized from dims, they would allocate blindly)
    check_declared_ranks(proto, name)
    tensors = list(model_tensors(proto))  # one walk for the three passes below
    check_proto_sizes(proto, memory_limit, name, tensors)
    _load_external_data(proto, base_dir, name, tensors)
    check_proto_data(proto, name, frozenset(mapped), tensors)
    edited = False  # whether ``tensors`` may no longer be all the model holds
    if prepare is not None:  # the session options' edits (free dimensions, initializers)
        if not owned:
            proto, owned = _copy(proto), True  # never edit the caller's proto
        prepare(proto)
        edited = True
    if compiled is not None and compiled.is_compiled(proto):
        if not owned:
            proto, owned = _copy(proto), True
        if compiled.expand(proto, base_dir, name):
            infer_shapes = False  # typed and optimized when it was compiled
        # its groups' nodes stay as they were compiled
        lift_constants, fold_fills, legacy_inputs = False, None, False
        edited = True
    notes: list[str] = []
    # the tensors walked above tell whether anything is sparse (a walk of every node's
    # attributes saved: ~1 ms of a 600-node model's creation)
    if _has_sparse(model_tensors(proto) if edited else tensors):
        if not owned:
            proto, owned = _copy(proto), True  # densifying edits the proto: never the caller's
        _densify_sparse(proto, name)
    # the optimizer's first passes done now when loading owns the proto: the checks and
    # inference then read fewer nodes (else after inference, on the copy it makes)
    ask = EarlyAsk(lift_constants, legacy_inputs, fold_fills, drop_unread, memory_limit)
    work = EarlyWork()
    if owned and ask.anything and settled_layout(proto):
        apply_early_passes(proto, ask, work, before_checks=True)
    # the checker and shape inference serialize the whole model (several copies of every
    # weight at once); they get a skeleton whose large initializers are typed inputs instead
    # (and the folded fills, whose data is made only when the graph is built)
    skeleton = _skeleton(proto, work.fold.fills) if (mode != "off" or infer_shapes) else None
    complaint = None
    if mode != "off":
        _refuse_newer_ir(proto, name)
        complaint = _checker_complaint(skeleton or proto, name, strict=mode == "strict")
    if complaint is not None:
        notes.append(f"{name}: onnx.checker: {complaint} (loaded anyway, as onnxruntime loads such models; "
                     "check_model='strict' refuses them)")
    # refusals of what is unsafe to run, repairs of what onnxruntime reads one way (a
    # dry run first when the proto is the caller's: it is copied only when repaired)
    unverifiable = frozenset(mapped) | frozenset(work.fold.fills)
    repairs = [] if trusted else vet_model(proto, name, unverifiable, repair=owned)
    if repairs and not owned:
        proto, owned = _copy(proto), True
        repairs = vet_model(proto, name, unverifiable)
    notes.extend(repairs)
    if repairs and skeleton is not None:
        skeleton = _skeleton(proto, work.fold.fills)
    if complaint is not None:
        # what the checker says once the repaired problems are gone, then every node on
        # its own (the checker stops at its first complaint)
        later = _checker_complaint(skeleton or proto, name, strict=False) if repairs else None
        if later is not None and later != complaint:
            notes.append(f"{name}: onnx.checker: {later} (loaded anyway, as onnxruntime loads such models; "
                         "check_model='strict' refuses them)")
        notes.extend(vet_nodes(proto, name, known=f"{complaint} {later or ''}"))
    if not trusted:
        check_attributes(proto, name)  # values onnx's inference would crash on, before it runs
    if infer_shapes:
        inferred = _infer_shapes(skeleton or proto, name, notes, editable=skeleton is not None or owned)
        if skeleton is not None:
            if not owned:  # adopting the inferred types edits the proto: never the caller's
                proto, owned = _copy(proto), True
            _adopt_inferred(proto, inferred)
        else:
            owned = owned or inferred is not proto  # a proto inference made, not the caller's
            proto = inferred
    if owned and ask.anything and work.left:  # what waited (or a caller's proto inference copied)
        apply_early_passes(proto, ask, work, before_checks=False)
    maps = None
    if model_has_maps(proto):  # onnx_ir cannot hold map types: they travel beside it
        if not owned:
            proto, owned = _copy(proto), True
        maps = strip_map_types(proto)
    try:
        plain = take_plain_types(proto.graph) if owned else {}  # plain tensor types: set directly (faster)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = ir.serde.deserialize_model(proto)
        apply_plain_types(model.graph, plain)
        if maps:
            attach_map_types(model.graph, maps)
        attach_fills(model.graph, work.fold.fills)
        _own_initializer_data(model.graph, mapped, name)
    except ModelLoadError:
        raise
    except Exception as exc:
        raise ModelLoadError(f"{name}: cannot build the graph: {type(exc).__name__}: {exc}") from exc
    return LoadedModel(model=model, source=name, base_dir=base_dir, warnings=notes, lifted_constants=work.lifted,
                       folded_fills=work.fold.nodes, legacy_inputs_dropped=work.legacy_dropped,
                       dropped_initializers=work.fold.dropped)


#: Initializers at least this large are left out of the checker / inference skeleton.
SKELETON_MIN_BYTES = 1 << 16


def _tensor_bytes(tensor: onnx.TensorProto) -> int:
    if tensor.data_type in (0, onnx.TensorProto.STRING):
        return 0
    itemsize = item_size(tensor.data_type)  # None: an unknown dtype, left to the checker
    return math.prod(tensor.dims) * itemsize if itemsize else 0


def _skeleton(proto: onnx.ModelProto, data_less: Collection[str] = ()) -> onnx.ModelProto | None:
    """The model without the data of large initializers (and of those named ``data_less``,
    which have none yet), which become typed graph inputs (same checker verdict and
    inferred shapes; weights are not shape tensors)."""
    graph = proto.graph
    big = [t for t in graph.initializer if t.name in data_less or _tensor_bytes(t) >= SKELETON_MIN_BYTES]
    if not big:
        return None
    big_names = {t.name for t in big}
    skeleton = onnx.ModelProto(
        ir_version=proto.ir_version, producer_name=proto.producer_name, producer_version=proto.producer_version,
        domain=proto.domain, model_version=proto.model_version, doc_string=proto.doc_string,
    )
    skeleton.opset_import.extend(proto.opset_import)
    skeleton.functions.extend(proto.functions)
    skeleton.metadata_props.extend(proto.metadata_props)
    sg = skeleton.graph
    sg.name = graph.name
    sg.doc_string = graph.doc_string
    sg.node.extend(graph.node)
    sg.input.extend(graph.input)
    declared = {i.name for i in graph.input}
    for tensor in big:
        if tensor.name not in declared:
            sg.input.append(onnx.helper.make_tensor_value_info(tensor.name, tensor.data_type, list(tensor.dims)))
    sg.output.extend(graph.output)
    sg.value_info.extend(graph.value_info)
    sg.initializer.extend(t for t in graph.initializer if t.name not in big_names)
    sg.sparse_initializer.extend(graph.sparse_initializer)
    sg.quantization_annotation.extend(graph.quantization_annotation)
    return skeleton


def _adopt_inferred(proto: onnx.ModelProto, inferred: onnx.ModelProto) -> None:
    """Take the inferred types (value_info, outputs, subgraphs inside nodes) back into ``proto``."""
    graph = proto.graph
    del graph.value_info[:]
    graph.value_info.extend(inferred.graph.value_info)
    del graph.output[:]
    graph.output.extend(inferred.graph.output)
    del graph.node[:]
    graph.node.extend(inferred.graph.node)


def _own_initializer_data(graph: ir.Graph, mapped: dict[str, np.ndarray], source: str) -> None:
    """Give each initializer a numpy-backed tensor so the protobuf (a second copy of every
    weight) can be freed once loading is done; mapped ones are views of the model file.
    Data that does not fit its dims and type is a :class:`ModelLoadError` naming it."""
    for name, value in graph.initializers.items():
        tensor = value.const_value
        if name in mapped and tensor is not None:
            value.const_value = ir.Tensor(mapped[name], dtype=tensor.dtype, name=tensor.name)
            continue
        if tensor is None or isinstance(tensor, ir.Tensor) or tensor.dtype == ir.DataType.STRING:
            continue
        try:
            array = tensor.numpy()
        except Exception as exc:  # noqa: BLE001 - too few or too many bytes for the dims
            raise ModelLoadError(f"{source}: initializer {name!r} has data that does not fit its dims "
                                 f"{list(tensor.shape)} and type {tensor.dtype}: {type(exc).__name__}: {exc}") from exc
        value.const_value = ir.Tensor(array, dtype=tensor.dtype, name=tensor.name)


def as_model_proto(model: Any) -> onnx.ModelProto:
    """Serialize an onnx_ir model back to a proto (for compilers and tools), map types
    included (see :mod:`epoxy.load.map_types`)."""
    proto = ir.serde.serialize_model(model)
    restore_map_types(proto, model)
    return proto
