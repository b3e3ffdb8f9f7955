"""The bundled demo: a digits classifier trained on scikit-learn's digits data.

``digits_mlp.onnx`` and ``digits_test.npz`` ship with the package; ``train_digits.py``
re-creates them (needs scikit-learn, which epoxy itself does not depend on).
"""

from pathlib import Path

DEMO_DIR = Path(__file__).parent
MODEL_PATH = DEMO_DIR / "digits_mlp.onnx"
TEST_DATA_PATH = DEMO_DIR / "digits_test.npz"
