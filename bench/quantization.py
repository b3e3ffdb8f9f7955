"""int8 against fp32 on each runtime, same run (issue #19): does quantizing pay off, and where.

CNNs (the light models with random weights, initializers taken out of the graph inputs):
static QDQ written by ``epoxy.quantization.quantize_static`` (per channel, u8s8 by default)
from a few seeded random calibration images; onnxruntime runs the QDQ model written by its own
``quantize_static`` (same settings, after its ``quant_pre_process``) and, in another row,
epoxy's. BERT-style encoder: onnxruntime runs its ``quantize_dynamic`` output; epoxy and
native OpenVINO run a weight-only int8 QDQ graph (int8 weights -> DequantizeLinear -> MatMul)
that OpenVINO compresses, with its dynamic activation quantization
(``dynamic_quantization_group_size``).

Every runtime's fp32 and int8 models are timed interleaved (``compare.time_interleaved``);
accuracy is each runtime's int8 against its own fp32 on held-out random inputs: relative
error ||q - f|| / ||f|| over all of them, and top-1 agreement for the CNNs.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python bench/quantization.py \\
        --models squeezenet,resnet50,bert --threads 2
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from compare import first_line, log, time_interleaved  # noqa: E402
from models import BenchModel, select_models  # noqa: E402

Feeds = dict[str, np.ndarray]
Runner = Callable[[Feeds], list[np.ndarray]]


# -- the models ---------------------------------------------------------------------------------
def fp32_model(bm: BenchModel) -> Any:
    """The fp32 model to quantize: light models get random weights (``accuracy.randomized``) and
    lose the initializers listed as graph inputs (a graph input is not a constant to any
    runtime: biases would stay float and reshapes run per call)."""
    import onnx

    proto = onnx.load(str(bm.path))
    if "light" not in bm.tags:
        return proto
    from accuracy import randomized

    proto = randomized(proto, 0)
    inits = {i.name for i in proto.graph.initializer}
    kept = [i for i in proto.graph.input if i.name not in inits]
    del proto.graph.input[:]
    proto.graph.input.extend(kept)
    return proto


def weight_only_qdq(proto: Any) -> Any:
    """int8 weights per output column behind DequantizeLinear for every MatMul whose B is a 2-D
    float initializer (the ``quantize_dynamic(format="qdq")`` graph, until that is exported)."""
    import onnx
    from onnx import helper, numpy_helper

    from epoxy.quantization.weights import quantize_weight

    model = onnx.ModelProto()
    model.CopyFrom(proto)
    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    done: dict[str, str] = {}
    nodes = []
    for node in graph.node:
        name = node.input[1] if node.op_type == "MatMul" and len(node.input) > 1 else ""
        if name in inits and len(inits[name].dims) == 2 and inits[name].data_type == onnx.TensorProto.FLOAT:
            if name not in done:
                qt = quantize_weight(numpy_helper.to_array(inits[name]), dtype="int8", axis=1, symmetric=True)
                graph.initializer.extend([numpy_helper.from_array(qt.values, f"{name}_quantized"),
                                          numpy_helper.from_array(qt.scale, f"{name}_scale"),
                                          numpy_helper.from_array(qt.zero_point, f"{name}_zero_point")])
                nodes.append(helper.make_node("DequantizeLinear",
                                              [f"{name}_quantized", f"{name}_scale", f"{name}_zero_point"],
                                              [f"{name}_dequantized"], name=f"{name}_dequantize", axis=1))
                done[name] = f"{name}_dequantized"
            node.input[1] = done[name]
        nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)
    kept = [i for i in graph.initializer if i.name not in done]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    onnx.checker.check_model(model)
    return model


def epoxy_weight_only(proto: Any) -> tuple[Any, str]:
    """The library's ``quantize_dynamic(format="qdq")`` when it is exported, else ours."""
    import epoxy.quantization

    quantize_dynamic = getattr(epoxy.quantization, "quantize_dynamic", None)
    if quantize_dynamic is None:
        return weight_only_qdq(proto), "bench weight_only_qdq"
    return quantize_dynamic(proto, format="qdq"), "epoxy.quantization.quantize_dynamic(format='qdq')"


class _Reader:
    """onnxruntime's CalibrationDataReader over a list of feeds."""

    def __init__(self, feeds: list[Feeds]) -> None:
        self._it = iter(feeds)

    def get_next(self) -> Feeds | None:
        return next(self._it, None)


def ort_static_qdq(fp32_path: Path, out: Path, calib: list[Feeds], act: str) -> None:
    """onnxruntime's tool as a user runs it: opset 13 first (per-channel QDQ on the light models'
    opset 9 writes a model onnxruntime refuses: DequantizeLinear-10 has no ``axis``), pre-process,
    then QDQ per channel."""
    import onnx
    from onnx import version_converter
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    proto = onnx.load(str(fp32_path))
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 13)
    source = out.with_suffix(".op13.onnx")
    onnx.save(version_converter.convert_version(proto, 13) if opset < 13 else proto, str(source))
    pre = out.with_suffix(".pre.onnx")
    quant_pre_process(str(source), str(pre))
    quantize_static(str(pre), str(out), _Reader(calib), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8 if act == "uint8" else QuantType.QInt8,
                    weight_type=QuantType.QInt8)


def ort_dynamic(fp32_path: Path, out: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(str(fp32_path), str(out), weight_type=QuantType.QInt8)


@dataclass
class Files:
    """The files one model is timed on: fp32, epoxy's int8 and onnxruntime's int8."""

    fp32: Path
    epoxy_int8: Path
    ort_int8: Path
    cnn: bool
    notes: list[str] = field(default_factory=list)


def prepare(bm: BenchModel, work: Path, calib: list[Feeds], args: argparse.Namespace) -> Files:
    import onnx

    from epoxy.quantization import quantize_static

    proto = fp32_model(bm)
    files = Files(work / f"{bm.name}.fp32.onnx", work / f"{bm.name}.epoxy_int8.onnx",
                  work / f"{bm.name}.ort_int8.onnx", cnn="light" in bm.tags)
    onnx.save(proto, str(files.fp32))
    t0 = time.perf_counter()
    if files.cnn:
        from epoxy.quantization.preprocess import preprocess

        # as `epoxy quantize` does: BatchNorms folded into the convolutions first, so the QDQ
        # convolutions are the Conv -> Relu -> Q patterns integer kernels take
        q = quantize_static(preprocess(proto)[0], calib, activation_dtype=args.activation_dtype, per_channel=True)
        files.notes.append(f"epoxy pre-process + quantize_static ({args.activation_dtype[0]}8s8, per channel, "
                           f"minmax, {len(calib)} images) {time.perf_counter() - t0:.1f} s")
        onnx.save(q, str(files.epoxy_int8))
        ort_static_qdq(files.fp32, files.ort_int8, calib, args.activation_dtype)
    else:
        if args.encoder == "static":  # activations too: OpenVINO runs the MatMuls as int8 x int8 (AMX / VNNI)
            q = quantize_static(proto, calib, op_types=("MatMul", "Gemm"), activation_dtype="uint8",
                                per_channel=True)
            how = f"epoxy quantize_static MatMul/Gemm (u8s8, per channel, minmax, {len(calib)} inputs)"
        elif args.encoder == "dynamic":  # DynamicQuantizeLinear -> MatMulInteger: ep-cpu's integer kernels
            from epoxy.quantization import quantize_dynamic

            q = quantize_dynamic(proto, per_channel=True, format="qoperator")
            how = "epoxy quantize_dynamic (qoperator: u8 activations at run time, s8 weights per channel)"
        else:
            q, how = epoxy_weight_only(proto)
        files.notes.append(f"{how} {time.perf_counter() - t0:.1f} s")
        onnx.save(q, str(files.epoxy_int8))
        ort_dynamic(files.fp32, files.ort_int8)
    return files


# -- runtimes -----------------------------------------------------------------------------------
def ov_properties(threads: int, args: argparse.Namespace, int8: bool) -> dict[str, Any]:
    props: dict[str, Any] = {"INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1,
                             "INFERENCE_PRECISION_HINT": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": 0}
    if int8:
        props["DYNAMIC_QUANTIZATION_GROUP_SIZE"] = args.dq_group_size
    return props


def load_epoxy_ov(path: Path, threads: int, args: argparse.Namespace, int8: bool) -> tuple[Runner, dict[str, Any]]:
    import epoxy
    import epoxy_ep_openvino
    from epoxy_ep_openvino.exec_precision import int8_compute_layers

    options: dict[str, Any] = {"num_threads": threads, "performance_hint": "LATENCY", "num_streams": 1,
                               "precision": "f32"}
    if int8:
        options["dynamic_quantization_group_size"] = args.dq_group_size
    sess = epoxy.InferenceSession(str(path), providers=[("openvino", options), "cpu"],
                                  sess_options=epoxy.SessionOptions(intra_op_num_threads=threads))
    report = sess.partition_report()
    nodes = report.nodes
    claimed = sum(d.provider == "openvino" for d in nodes)

    def run(feeds: Feeds) -> list[np.ndarray]:
        return sess.run(None, feeds)

    def describe() -> str:
        from collections import Counter

        i8, total = int8_compute_layers(Counter(epoxy_ep_openvino.layer_precisions(sess)))
        return f"openvino {claimed}/{len(nodes)} nodes, {len(report.groups)} group(s); int8 layers {i8}/{total}"

    return run, {"describe": describe}


def load_epoxy_cpu(path: Path, threads: int, args: argparse.Namespace, int8: bool) -> tuple[Runner, dict[str, Any]]:
    import epoxy

    sess = epoxy.InferenceSession(str(path), providers=["cpu"],
                                  sess_options=epoxy.SessionOptions(intra_op_num_threads=threads))
    return (lambda feeds: sess.run(None, feeds)), {}


def load_ort(path: Path, threads: int, args: argparse.Namespace, int8: bool) -> tuple[Runner, dict[str, Any]]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    return (lambda feeds: sess.run(None, feeds)), {}


def load_native_ov(path: Path, threads: int, args: argparse.Namespace, int8: bool) -> tuple[Runner, dict[str, Any]]:
    from collections import Counter

    from epoxy_ep_openvino.exec_precision import int8_compute_layers, layer_precisions
    from epoxy_ep_openvino.runtime import shared_core

    core = shared_core()
    compiled = core.compile_model(core.read_model(str(path)), "CPU", ov_properties(threads, args, int8))
    request = compiled.create_infer_request()
    outputs = list(compiled.outputs)
    index = {name: i for i, port in enumerate(compiled.inputs) for name in port.get_names()}

    def run(feeds: Feeds) -> list[np.ndarray]:
        res = request.infer({index[n]: v for n, v in feeds.items()}, share_inputs=True, share_outputs=False)
        return [res[o] for o in outputs]

    def describe() -> str:
        i8, total = int8_compute_layers(Counter(layer_precisions(compiled)))
        return f"int8 layers {i8}/{total}"

    return run, {"describe": describe}


@dataclass(frozen=True)
class Runtime:
    """A row of the table: how it loads, and which int8 file it runs (``epoxy`` or ``ort``)."""

    name: str
    load: Callable[[Path, int, argparse.Namespace, bool], tuple[Runner, dict[str, Any]]]
    int8_file: str


RUNTIMES: dict[str, Runtime] = {r.name: r for r in (
    Runtime("epoxy-ov", load_epoxy_ov, "epoxy"),
    Runtime("epoxy-cpu", load_epoxy_cpu, "epoxy"),
    Runtime("onnxruntime", load_ort, "ort"),
    Runtime("onnxruntime-epoxyq", load_ort, "epoxy"),
    Runtime("epoxy-cpu-ortq", load_epoxy_cpu, "ort"),  # the QDQ file a user brings from onnxruntime's tool
    Runtime("openvino", load_native_ov, "epoxy"),
)}
DEFAULT_RUNTIMES = "epoxy-ov,epoxy-cpu,onnxruntime,onnxruntime-epoxyq,openvino"


# -- accuracy -----------------------------------------------------------------------------------
def accuracy(fp32: list[np.ndarray], int8: list[np.ndarray], cnn: bool) -> dict[str, float]:
    """Relative error of the first output over all held-out inputs; top-1 agreement for CNNs."""
    f = np.stack([np.asarray(o, np.float64) for o in fp32])
    q = np.stack([np.asarray(o, np.float64) for o in int8])
    out = {"rel_err": float(np.linalg.norm(q - f)) / max(float(np.linalg.norm(f)), 1e-30)}
    if cnn:
        top_f = f.reshape(len(fp32), -1).argmax(axis=1)
        top_q = q.reshape(len(int8), -1).argmax(axis=1)
        out["top1"] = float(np.mean(top_f == top_q))
    return out


# -- one model ----------------------------------------------------------------------------------
def bench_model(bm: BenchModel, work: Path, threads: int, runtimes: list[Runtime],
                args: argparse.Namespace) -> dict[str, Any]:
    rng = np.random.default_rng(args.seed)
    calib = [bm.make_feeds(rng) for _ in range(args.calib)]
    held_out = [bm.make_feeds(rng) for _ in range(args.held_out)]
    files = prepare(bm, work, calib, args)
    rec: dict[str, Any] = {"model": bm.name, "threads": threads, "notes": files.notes, "rows": {}}
    fns: dict[str, Runner] = {}
    for rt in runtimes:
        row: dict[str, Any] = {}
        rec["rows"][rt.name] = row
        outs = {}
        for kind, path in (("fp32", files.fp32),
                           ("int8", files.epoxy_int8 if rt.int8_file == "epoxy" else files.ort_int8)):
            log(f"{bm.name}: loading {rt.name} {kind}")
            try:
                fn, info = rt.load(path, threads, args, kind == "int8")
                outs[kind] = [np.asarray(fn(dict(f))[0]) for f in held_out]
            except Exception as exc:  # a runtime that cannot load or run a model is a row, not a crash
                row[f"{kind}_error"] = first_line(exc)
                continue
            fns[f"{rt.name}/{kind}"] = fn
            if "describe" in info:
                row[f"{kind}_info"] = info["describe"]()
        if "fp32" in outs and "int8" in outs:
            row.update(accuracy(outs["fp32"], outs["int8"], files.cnn))
    log(f"{bm.name}: timing {len(fns)} sessions")
    medians, samples, errors = time_interleaved(fns, held_out[0], runs=args.runs, block=args.block, warmup=2,
                                                budget=args.budget, min_runs=3, settle=args.settle)
    for key, med in medians.items():
        name, kind = key.split("/")
        rec["rows"][name][f"{kind}_ms"] = med * 1e3
        rec["rows"][name][f"{kind}_n"] = len(samples[key])
    for key, err in errors.items():
        name, kind = key.split("/")
        rec["rows"][name][f"{kind}_error"] = err
    return rec


# -- output -------------------------------------------------------------------------------------
def _ms(row: dict[str, Any], kind: str) -> str:
    if f"{kind}_ms" in row:
        return f"{row[f'{kind}_ms']:.2f}"
    return "FAIL" if f"{kind}_error" in row else "-"


def print_table(records: list[dict[str, Any]], out: Any = sys.stdout) -> None:
    print("| model | thr | runtime | fp32 ms | int8 ms | int8 speedup | vs onnxruntime int8 | rel err | top-1 "
          "| int8 execution |", file=out)
    print("|---|---|---|---|---|---|---|---|---|---|", file=out)
    for rec in records:
        rows = rec["rows"]
        ort_int8 = rows.get("onnxruntime", {}).get("int8_ms")
        for name, row in rows.items():
            speedup = f"{row['fp32_ms'] / row['int8_ms']:.2f}x" if "fp32_ms" in row and "int8_ms" in row else "-"
            vs_ort = f"{ort_int8 / row['int8_ms']:.2f}x" if ort_int8 and "int8_ms" in row else "-"
            rel = f"{100 * row['rel_err']:.2f}%" if "rel_err" in row else "-"
            top1 = f"{100 * row['top1']:.0f}%" if "top1" in row else "-"
            info = row.get("int8_info") or row.get("int8_error") or row.get("fp32_error") or ""
            print(f"| {rec['model']} | {rec['threads']} | {name} | {_ms(row, 'fp32')} | {_ms(row, 'int8')} | "
                  f"{speedup} | {vs_ort} | {rel} | {top1} | {info} |", file=out)
    for rec in records:
        print(f"\n{rec['model']}: " + "; ".join(rec["notes"]), file=out)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="squeezenet,resnet50,bert", help="comma-separated filter (bench/models.py)")
    ap.add_argument("--threads", default="2", help="comma-separated thread counts")
    ap.add_argument("--runtimes", default=DEFAULT_RUNTIMES, help=f"comma-separated, of {', '.join(RUNTIMES)}")
    ap.add_argument("--runs", type=int, default=30, help="timed calls per session (at most)")
    ap.add_argument("--block", type=int, default=3, help="calls per block before switching session")
    ap.add_argument("--budget", type=float, default=4.0, help="seconds of timed calls per session")
    ap.add_argument("--settle", type=float, default=0.2, help="sleep before each block (idle worker threads)")
    ap.add_argument("--calib", type=int, default=8, help="random calibration inputs")
    ap.add_argument("--held-out", type=int, default=16, help="random held-out inputs for the accuracy columns")
    ap.add_argument("--activation-dtype", choices=("uint8", "int8"), default="uint8", help="CNN activations")
    ap.add_argument("--encoder", choices=("static", "weight-only", "dynamic"), default="static",
                    help="the encoder's epoxy int8 model: static QDQ on MatMul/Gemm (calibrated on --calib inputs), "
                         "weight-only int8 with OpenVINO's dynamic activation quantization, or dynamic int8 "
                         "(DynamicQuantizeLinear -> MatMulInteger, ep-cpu's integer kernels)")
    ap.add_argument("--dq-group-size", type=int, default=128,
                    help="OpenVINO's DYNAMIC_QUANTIZATION_GROUP_SIZE for the int8 sessions (0: off; OpenVINO's "
                         "default is 32, 128 was the fastest on the encoder here)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write the records here")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    unknown = [r for r in args.runtimes.split(",") if r not in RUNTIMES]
    if unknown:
        raise SystemExit(f"unknown runtimes {unknown}; known: {', '.join(RUNTIMES)}")
    runtimes = [RUNTIMES[r] for r in args.runtimes.split(",")]
    records = []
    with tempfile.TemporaryDirectory(prefix="epoxy-bench-quant-") as tmp:
        for bm in select_models(args.models):
            for threads in [int(t) for t in args.threads.split(",")]:
                records.append(bench_model(bm, Path(tmp), threads, runtimes, args))
    print_table(records)
    if args.json:
        Path(args.json).write_text(json.dumps(records, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
