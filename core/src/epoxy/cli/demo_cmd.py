"""``epoxy demo``: classify the bundled held-out digits and show accuracy, partition, latency."""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from ..demo import MODEL_PATH, TEST_DATA_PATH
from ._console import console_for
from ._format import providers_arg
from .partition_cmd import print_report

ASCII_SHADES = " .:-=+*#%@"
#: below this the demo exits 1: the model or a provider is broken
MIN_ACCURACY = 0.9


EXAMPLE = """example:
  epoxy demo
  epoxy demo --providers openvino,cpu --runs 50"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--providers", help="comma-separated, priority order (default: all available)")
    parser.add_argument("--runs", type=int, default=200, help="timed single-image runs")


def _ascii(image: np.ndarray) -> list[str]:
    levels = (image.reshape(8, 8).astype(int) * (len(ASCII_SHADES) - 1)) // 16
    return ["".join(ASCII_SHADES[v] * 2 for v in row) for row in levels]


def run(args: argparse.Namespace) -> int:
    data = np.load(TEST_DATA_PATH)
    images, labels = data["images"], data["labels"]
    pixels = images.astype(np.float32) / 16.0
    from ..session import InferenceSession  # loads onnx_ir: only for commands that run a model

    session = InferenceSession(str(MODEL_PATH), providers=providers_arg(args.providers))
    out = console_for(args)
    out.line(f"model: {MODEL_PATH.name} (MLP trained on scikit-learn's digits), "
             f"providers: {', '.join(session.get_providers())}")
    print_report(out, session.partition_report(), per_node=False)

    probabilities, predicted = session.run(None, {"pixels": pixels})
    accuracy = float(np.mean(predicted == labels))
    out.line(f"\naccuracy on {len(labels)} held-out digits: {accuracy:.4f} ({int(np.sum(predicted == labels))} "
             "correct)", kind="ok" if accuracy > MIN_ACCURACY else "error")
    for i in range(3):
        out.line(f"\nsample {i}: label {labels[i]}, predicted {predicted[i]} "
                 f"(p={probabilities[i, predicted[i]]:.3f})", kind=None if predicted[i] == labels[i] else "warn")
        out.line("\n".join("  " + line for line in _ascii(images[i])))

    one = pixels[:1]
    runs = max(1, args.runs)
    times = []
    with out.progress("timing", 10 + runs) as advance:  # a bar on a terminal only
        for _ in range(10):
            session.run(None, {"pixels": one})
        advance(10)
        for _ in range(runs):
            start = time.perf_counter()
            session.run(None, {"pixels": one})
            times.append((time.perf_counter() - start) * 1e6)
            advance(1)
    start = time.perf_counter()
    session.run(None, {"pixels": pixels})
    batch_ms = (time.perf_counter() - start) * 1e3
    times.sort()
    out.line(f"\nlatency, batch 1: p50 {statistics.median(times):.1f} us, p90 {times[int(0.9 * (len(times) - 1))]:.1f} "
             f"us over {len(times)} runs; whole batch of {len(labels)}: {batch_ms:.2f} ms", kind="info")
    return 0 if accuracy > MIN_ACCURACY else 1
