"""``epoxy demo``: classify the bundled held-out digits and show accuracy, partition, latency."""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from ..demo import MODEL_PATH, TEST_DATA_PATH
from ._format import providers_arg

ASCII_SHADES = " .:-=+*#%@"


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
    print(
        f"model: {MODEL_PATH.name} (MLP trained on scikit-learn's digits), "
        f"providers: {', '.join(session.get_providers())}"
    )
    print(session.partition_report().format(per_node=False))

    probabilities, predicted = session.run(None, {"pixels": pixels})
    accuracy = float(np.mean(predicted == labels))
    print(f"\naccuracy on {len(labels)} held-out digits: {accuracy:.4f} ({int(np.sum(predicted == labels))} correct)")
    for i in range(3):
        print(f"\nsample {i}: label {labels[i]}, predicted {predicted[i]} (p={probabilities[i, predicted[i]]:.3f})")
        print("\n".join("  " + line for line in _ascii(images[i])))

    one = pixels[:1]
    for _ in range(10):
        session.run(None, {"pixels": one})
    times = []
    for _ in range(max(1, args.runs)):
        start = time.perf_counter()
        session.run(None, {"pixels": one})
        times.append((time.perf_counter() - start) * 1e6)
    start = time.perf_counter()
    session.run(None, {"pixels": pixels})
    batch_ms = (time.perf_counter() - start) * 1e3
    times.sort()
    print(f"\nlatency, batch 1: p50 {statistics.median(times):.1f} us, p90 {times[int(0.9 * (len(times) - 1))]:.1f} us "
          f"over {len(times)} runs; whole batch of {len(labels)}: {batch_ms:.2f} ms")
    return 0 if accuracy > 0.9 else 1
