"""Train the demo digits classifier and export it to ONNX (run by hand, not at run time).

    python -m epoxy.demo.train_digits     # needs scikit-learn

Trains a 64-128-64-10 ReLU MLP on scikit-learn's bundled 8x8 digits (no download), holds
out 25% for testing, and writes the model (MatMul/Add/Relu/Softmax, opset 17) and the
held-out images + labels next to this file.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from . import MODEL_PATH, TEST_DATA_PATH


def train() -> tuple[list[np.ndarray], list[np.ndarray], np.ndarray, np.ndarray, float]:
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    from sklearn.neural_network import MLPClassifier

    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    x_train, x_test, y_train, y_test = train_test_split(
        x, digits.target, test_size=0.25, random_state=0, stratify=digits.target
    )
    clf = MLPClassifier(hidden_layer_sizes=(128, 64), max_iter=400, random_state=0)
    clf.fit(x_train, y_train)
    accuracy = float(clf.score(x_test, y_test))
    return clf.coefs_, clf.intercepts_, x_test, y_test.astype(np.int64), accuracy


def export(weights: list[np.ndarray], biases: list[np.ndarray]) -> onnx.ModelProto:
    nodes, inits = [], []
    current = "pixels"
    for i, (w, b) in enumerate(zip(weights, biases)):
        inits += [
            numpy_helper.from_array(w.astype(np.float32), f"W{i}"),
            numpy_helper.from_array(b.astype(np.float32), f"B{i}"),
        ]
        nodes += [
            helper.make_node("MatMul", [current, f"W{i}"], [f"mm{i}"], name=f"dense{i}_matmul"),
            helper.make_node("Add", [f"mm{i}", f"B{i}"], [f"z{i}"], name=f"dense{i}_bias"),
        ]
        current = f"z{i}"
        if i < len(weights) - 1:
            nodes.append(helper.make_node("Relu", [current], [f"h{i}"], name=f"dense{i}_relu"))
            current = f"h{i}"
    nodes.append(helper.make_node("Softmax", [current], ["probabilities"], name="softmax", axis=-1))
    nodes.append(helper.make_node("ArgMax", ["probabilities"], ["label"], name="argmax", axis=1, keepdims=0))
    graph = helper.make_graph(
        nodes, "digits_mlp",
        [helper.make_tensor_value_info("pixels", TensorProto.FLOAT, ["batch", 64])],
        [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["batch", 10]),
         helper.make_tensor_value_info("label", TensorProto.INT64, ["batch"])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="epoxy-demo")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def main() -> None:
    weights, biases, x_test, y_test, accuracy = train()
    onnx.save(export(weights, biases), MODEL_PATH)
    images = np.rint(x_test * 16).astype(np.uint8)  # the digits data are integers 0..16
    np.savez_compressed(TEST_DATA_PATH, images=images, labels=y_test)
    print(f"scikit-learn accuracy on {len(y_test)} held-out digits: {accuracy:.4f}")
    print(f"wrote {MODEL_PATH} and {TEST_DATA_PATH}")


if __name__ == "__main__":
    main()
