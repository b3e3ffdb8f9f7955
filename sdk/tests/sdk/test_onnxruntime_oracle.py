"""The onnxruntime-oracle helpers: int8 weights stay within 7 bits exactly where onnxruntime's
uint8 x int8 products saturate (the probe is replaced here: the sdk session has no onnxruntime)."""

from __future__ import annotations

import numpy as np
import pytest

from epoxy_sdk.conformance import onnxruntime_oracle


@pytest.mark.parametrize("saturates", [True, False])
def test_weight_codes_follow_the_probe(monkeypatch: pytest.MonkeyPatch, saturates: bool) -> None:
    monkeypatch.setattr(onnxruntime_oracle, "onnxruntime_saturates_u8s8", lambda: saturates)
    rng = np.random.default_rng(0)
    w = onnxruntime_oracle.weight_codes(rng, np.int8, (4096,))
    assert w.dtype == np.int8
    assert (int(w.min()), int(w.max())) == ((-64, 63) if saturates else (-128, 127))
    signed = onnxruntime_oracle.weight_codes(rng, np.int8, (4096,), activation=np.int8)  # s8s8: never saturates
    assert (int(signed.min()), int(signed.max())) == (-128, 127)
    unsigned = onnxruntime_oracle.weight_codes(rng, np.uint8, (4096,))
    assert unsigned.dtype == np.uint8 and (int(unsigned.min()), int(unsigned.max())) == (0, 255)
    assert onnxruntime_oracle.reduce_range() is saturates


def test_the_probe_compares_onnxruntime_with_the_exact_product() -> None:
    pytest.importorskip("onnxruntime")
    onnxruntime_oracle.onnxruntime_saturates_u8s8.cache_clear()
    assert isinstance(onnxruntime_oracle.onnxruntime_saturates_u8s8(), bool)
