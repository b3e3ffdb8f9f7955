"""Write docs/MODEL_ZOO_TORCH.md from the torch zoo's cases: ``python tests/models_torch/zoo_table.py``.

Exports every case (the wheels of the ``models_torch`` nox session are needed), lists the
ops each model holds, and runs it with providers=["openvino", "cpu"] for openvino's share of
the nodes; a case's cpu status is "matches onnxruntime" or its strict xfail reason. Each
test checks its own row's cells against what it finds, and ``test_torch_zoo_table.py``
checks that the table has no row without a case, so a stale table fails CI.
"""

from __future__ import annotations

import importlib.metadata
import sys
import tempfile
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from model_cache import ModelStore
from torch_harness import COLUMNS, TABLE, Case, openvino_found, row_cells

PACKAGES = ("torch", "transformers", "onnxscript", "onnxruntime", "onnx", "openvino")

INTRO = """\
# Model zoo: torch.onnx and Hugging Face transformers as the real exporters write them

Every row is a model built in `tests/models_torch/` from a tiny config or a few layers, with
`torch.manual_seed` (nothing is downloaded), written by `torch.onnx.export` with the
TorchScript exporter (`dynamo=False`, opset 17) or the dynamo exporter (`dynamo=True`, its
default opset), or by one of onnxruntime's own tools from such a file. Every model has
dynamic axes (batch; sequence for text) and is exported at one size and run at others
(batch 3, then 1; sequence 11 for text exported at 7), on the same inputs by onnxruntime and
by epoxy.

- **epoxy cpu**: `providers=["cpu"]`; "matches onnxruntime" when every node was placed on cpu
  (`partition_report()`) and every output agrees for both batches: same names, dtype and
  shape, float32 values within rtol 1e-3 / atol 1e-4; dynamically quantized models within
  rtol 1e-3 / atol 1e-3 (allowing an activation's rounding to flip one uint8 step on float32
  noise); statically quantized models within one step of the output's quantization scale (the
  output is DequantizeLinear of a uint8 tensor). `tests/models_torch/torch_harness.py` says why.
- **epoxy openvino+cpu**: `providers=["openvino", "cpu"]`, the same comparison, and how many of
  the partitioned nodes openvino took (the rest ran on cpu). ep-openvino compiles with
  `INFERENCE_PRECISION_HINT=f32` unless told otherwise, so on CPUs whose native OpenVINO
  default is bf16 the comparison is still at f32.

An "xfail" cell is a strict `pytest.mark.xfail` whose reason is shown: when it starts to pass,
CI fails until the mark and this table are updated. The ops column lists the ops of the main
graph; a domain other than the default is spelled out (`com.microsoft.`).

CI runs these in the `models_torch` nox session (`nox -s models_torch`); there the quantization
checks (`test_torch_zoo_quantize.py`) quantize each exporter-made model in one mode, the modes
rotating over the models, and `EPOXY_ZOO_QUANTIZE_ALL=1 nox -s models_torch` runs every model in
every mode (3x that file's time). Each test checks its
own cells here against what it just found; regenerate the table with
`python tests/models_torch/zoo_table.py` in a venv with that session's wheels. The ops and
node counts hold for the versions below.

The CNNs are torchvision's families written in plain torch in `cnn_models.py` (same layers,
same arrangement, a few channels): torchvision does not import beside the CPU torch 2.13 on
the test machines, and torchvision 0.29 from PyPI pulls a CUDA torch (about 5.5 GB).
The rows of onnxruntime's tools read the TorchScript files of BERT and GPT-2 built with
transformers' eager attention: its transformer optimizer fuses Attention only on that graph.
"""

NOT_IN_ZOO = """\
## Not in the zoo, and why

What the exporters or onnxruntime's tools cannot do with these versions (torch 2.13.0+cpu,
transformers 5.24, onnxscript 0.7.2, onnxruntime 1.32), so there is no model to compare on:

- **T5EncoderModel with sdpa attention (transformers' default), dynamo exporter**: the export
  fails in its decomposition step (2/3): `ConversionError: Failed to decompose the FX graph for
  ONNX compatibility ... ValueError: Cannot view a tensor with shape torch.Size([s33, s50, 4, 8])
  and strides (32*s50, 8, 8*s50, 1) as a tensor with shape (s33, s50, 32)!` (the `view` after
  the attention's transpose, with a dynamic sequence). The zoo's T5 rows use
  `attn_implementation="eager"`, which both exporters write.
- **onnxruntime's transformer optimizer on sdpa-attention exports**: `optimize_model(...,
  model_type="bert")` fuses no Attention and no EmbedLayerNormalization on a BertModel
  exported with sdpa attention (only SkipLayerNormalization, BiasGelu), with either exporter;
  on the dynamo export of eager-attention BERT it also fuses no Attention. So the tool rows
  read the TorchScript eager-attention exports.
- **onnxruntime's transformer optimizer on GPT-2**: with transformers 5.24's causal-mask graph,
  `model_type="gpt2"` fuses no Attention on either attention implementation (FastGelu and
  SkipLayerNormalization only: the `ortopt-gpt2` row); on the dynamo export it fails:
  `IndexError: list index out of range` at `onnx_model_gpt2.py` `postprocess`
  (`gemm_node.input[2]`: the dynamo exporter's Gemm has no bias input).
- **quantize_dynamic after the transformer optimizer** fails without
  `extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT}`: `RuntimeError: Unable to find
  data type for weight_name='...MatMul_output_0'. shape_inference failed to return a type` (onnx's
  shape inference does not type the com.microsoft ops' outputs); the zoo passes it.
- **torchvision's own models** (resnet18, mobilenet_v2, squeezenet1_1, efficientnet_b0): see
  above; the plain-torch families stand in for them.
"""


def all_cases() -> list[Case]:
    """Every torch zoo case, in table order."""
    from torch_zoo import CASES

    return list(CASES)


def _versions() -> str:
    found = []
    for name in PACKAGES:
        try:
            found.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            continue
    return "Generated with " + ", ".join(found) + "."


def _share(case: Case, store: ModelStore) -> str | None:
    """openvino's share of the nodes, or None for an openvino xfail (whose check fails)."""
    try:
        return openvino_found(case, store)
    except Exception as error:
        if case.openvino_xfail:
            return None
        raise RuntimeError(f"{case.id}: openvino+cpu fails without an xfail: {error}") from error


def render(cases: list[Case], cells: dict[str, list[str]]) -> str:
    """The whole document."""
    runs = sum(not c.xfail for c in cases)
    on_openvino = sum(not c.openvino_xfail for c in cases)
    lines = [INTRO, _versions(), "",
             (f"{len(cases)} models: {runs} match onnxruntime on cpu ({len(cases) - runs} xfail), "
             f"{on_openvino} on openvino+cpu ({len(cases) - on_openvino} xfail)."), "",
             "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for case in cases:
        lines.append("| " + " | ".join([f"`{case.id}`", *cells[case.id]]) + " |")
    lines += ["", NOT_IN_ZOO]
    return "\n".join(lines)


def main() -> None:
    import onnx

    warnings.simplefilter("ignore")
    cases = all_cases()
    cells = {}
    with tempfile.TemporaryDirectory() as folder:
        store = ModelStore(Path(folder))
        for case in cases:
            model = onnx.load(str(case.build(store)))
            cells[case.id] = row_cells(case, model, _share(case, store))
            print(f"{case.id}: {cells[case.id][-1]}", flush=True)
    TABLE.write_text(render(cases, cells), encoding="utf-8")
    print(f"wrote {TABLE} ({len(cases)} cases)")


if __name__ == "__main__":
    main()
