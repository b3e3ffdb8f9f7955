"""Fixtures for the ep-openvino tests; everything here needs OpenVINO installed."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("openvino", reason="openvino is not installed")


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.fixture
def ov_all():
    """Provider list that claims every supported group, however small."""
    return [("openvino", {"min_group_cost": 0}), "cpu"]
