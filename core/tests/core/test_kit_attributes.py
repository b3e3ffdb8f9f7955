"""``epoxy.kit.passes.as_attribute`` types a value as onnx_ir's ``convert_attribute`` does
(its own fast path for plain values and lists), falling back to it for everything else."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest

from epoxy.kit.passes import as_attribute

VALUES = [1, True, 1.5, "Relu", [1, 2], (3, 4), [1.0, 2.0], ("a", "b"), [True, False],
          ir.AttrInt64("a", 5), ir.tensor(np.arange(3, dtype=np.float32))]


@pytest.mark.parametrize("value", VALUES, ids=[type(v).__name__ + str(i) for i, v in enumerate(VALUES)])
def test_typed_as_onnx_ir_types_it(value):
    want = ir.convenience.convert_attribute("a", value)
    got = as_attribute("a", value)
    assert (got.name, got.type) == (want.name, want.type)
    if got.type == ir.AttributeType.TENSOR:
        np.testing.assert_array_equal(got.value.numpy(), want.value.numpy())
    else:
        assert got.value == want.value


@pytest.mark.parametrize("value", [[1, 2.0], [], object(), np.int64(3), [np.int64(1)]])
def test_what_onnx_ir_cannot_type_fails_or_defaults_the_same_way(value):
    try:
        want = ir.convenience.convert_attribute("a", value)
    except Exception as exc:  # noqa: BLE001 - the same error, whatever it is
        with pytest.raises(type(exc)):
            as_attribute("a", value)
    else:
        got = as_attribute("a", value)
        assert (got.type, got.value) == (want.type, want.value)
