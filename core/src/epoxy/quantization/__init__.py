"""Post-training quantization (issue #19): the ``epoxy quantize`` tool and its pieces.

``quantize_model`` (the API behind ``epoxy quantize``) picks a scheme for the target
providers and CPU, checks the result before anything is written, and reports size, accuracy,
latency and which nodes run in integer. Its pieces: ``collect(model, feeds)`` runs the model
once over the calibration batches and keeps a histogram per activation;
``stats.ranges(method)`` reads a range per tensor with ``minmax``, ``percentile``,
``entropy`` or ``mse``; ``quant_params`` turns a range into QuantizeLinear's scale and zero
point; ``quantize_static`` writes a QDQ model from them; ``quantize_dynamic`` and
``quantize_weights`` quantize weights only (activations at run time, or kept float);
``convert_float`` converts to float16 or bfloat16. docs/QUANTIZATION.md says when to use which.
"""

from __future__ import annotations

from epoxy.quantization.collect import activation_tensors, collect
from epoxy.quantization.dynamic import quantize_dynamic, quantize_dynamic_report
from epoxy.quantization.errors import CalibrationDataError
from epoxy.quantization.feeds import CalibrationDataReader, folder_feeds, iter_feeds
from epoxy.quantization.float16 import convert_float, convert_float_report
from epoxy.quantization.histogram import DEFAULT_BINS, Histogram
from epoxy.quantization.methods import METHODS, entropy, minmax, mse, percentile
from epoxy.quantization.params import QuantParams, Range, dequantize, qrange, quant_params, quantize
from epoxy.quantization.qdq import QuantizationError, quantize_static
from epoxy.quantization.qoperator import to_qoperator
from epoxy.quantization.stats import CalibrationStats
from epoxy.quantization.tool import QuantizationReport, quantize_model
from epoxy.quantization.weight_only import quantize_weights, quantize_weights_report

__all__ = [
    "DEFAULT_BINS", "METHODS", "CalibrationDataError", "CalibrationDataReader", "CalibrationStats", "Histogram",
    "QuantParams", "Range", "activation_tensors", "collect", "dequantize", "entropy", "folder_feeds", "iter_feeds",
    "minmax", "mse", "percentile", "qrange", "quant_params", "quantize",
    "QuantizationError", "quantize_static", "convert_float", "convert_float_report",
    "quantize_dynamic", "quantize_dynamic_report", "quantize_weights", "quantize_weights_report",
    "QuantizationReport", "quantize_model",
    "to_qoperator",
]
