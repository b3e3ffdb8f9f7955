"""Factory identity, lazy import, device enumeration and option validation."""

from __future__ import annotations

import subprocess
import sys

import pytest
from ov_test_models import conv_net

import epoxy
from epoxy.contract import ProviderUnavailable
from epoxy.errors import InvalidArgumentError
from epoxy.sdk_api import incompatibility
from epoxy_ep_openvino.factory import OpenVINOProviderFactory
from epoxy_ep_openvino.options import parse_options


def test_plugin_import_does_not_import_openvino():
    code = "import sys, epoxy_ep_openvino, epoxy_ep_openvino.plugin; print('openvino' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_factory_identity_and_devices():
    f = OpenVINOProviderFactory()
    assert f.name == "openvino" and incompatibility(f.sdk_api) is None
    assert f.priority > 0
    devices = f.devices()
    assert devices and devices[0].provider == "openvino"
    assert any(d.kind == "cpu" and d.properties["ov_device"] == "CPU" for d in devices)


def test_registered_through_entry_point():
    from epoxy.plugins import default_registry

    entry = default_registry().get("openvino")
    assert entry is not None and entry.available


def test_missing_openvino_is_unavailable(monkeypatch):
    monkeypatch.setitem(sys.modules, "openvino", None)  # import raises ImportError
    with pytest.raises(ProviderUnavailable, match="openvino is not usable"):
        OpenVINOProviderFactory().devices()


def test_defaults_and_compile_config():
    opts = parse_options({})
    cfg = opts.compile_config()
    assert cfg == {"PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1, "INFERENCE_PRECISION_HINT": "f32"}
    opts = parse_options({"performance_hint": "throughput", "num_threads": 2, "precision": "default",
                          "cache_dir": "/tmp/x", "config": {"ENABLE_CPU_PINNING": False}, "device": "AUTO"})
    cfg = opts.compile_config()
    assert cfg["PERFORMANCE_HINT"] == "THROUGHPUT" and cfg["INFERENCE_NUM_THREADS"] == 2
    assert "NUM_STREAMS" not in cfg and "INFERENCE_PRECISION_HINT" not in cfg
    assert cfg["CACHE_DIR"] == "/tmp/x" and cfg["ENABLE_CPU_PINNING"] is False
    assert opts.device == "AUTO"


@pytest.mark.parametrize("options, match", [
    ({"devcie": "CPU"}, "unknown options"),
    ({"performance_hint": "FAST"}, "performance_hint"),
    ({"num_threads": -1}, "num_threads"),
    ({"num_threads": True}, "num_threads"),
    ({"precision": "f8"}, "precision"),
    ({"min_group_cost": "x"}, "min_group_cost"),
    ({"config": ["a"]}, "config"),
    ({"float16": "yes"}, "float16"),
    ({"device": ""}, "device"),
])
def test_bad_options(options, match):
    with pytest.raises(InvalidArgumentError, match=match):
        parse_options(options)


def test_bad_option_through_session(rng):
    with pytest.raises(InvalidArgumentError, match="openvino provider: unknown options"):
        epoxy.InferenceSession(conv_net(rng), providers=[("openvino", {"thread": 2}), "cpu"])


def test_env_min_group_cost(monkeypatch):
    monkeypatch.setenv("EPOXY_OPENVINO_MIN_GROUP_COST", "0")
    assert parse_options({}).min_group_cost == 0.0
    assert parse_options({"min_group_cost": 5}).min_group_cost == 5.0
    monkeypatch.setenv("EPOXY_OPENVINO_MIN_GROUP_COST", "lots")
    with pytest.raises(InvalidArgumentError):
        parse_options({})


def test_unknown_device_is_a_provider_error(rng):
    from epoxy.errors import EpoxyError

    # a device OpenVINO does not have: every group fails to compile and is declined with the reason
    sess = epoxy.InferenceSession(conv_net(rng), providers=[("openvino", {"device": "NOSUCH"}), "cpu"])
    report = sess.partition_report()
    assert report.summary() == {"cpu": 5}
    why = " ".join(r for d in report.nodes for p, r in d.declined if p == "openvino")
    assert "could not compile" in why
    assert issubclass(InvalidArgumentError, EpoxyError)


def test_string_values_as_onnxruntime_users_pass_them():
    """The kit's one rule (``epoxy.kit.OptionTable``): strings parse like native values."""
    opts = parse_options({"float16": "1", "num_threads": "2", "num_streams": "3", "min_group_cost": "0.5",
                          "precision": "FP16", "config": '{"ENABLE_CPU_PINNING": false}'})
    assert (opts.float16, opts.num_threads, opts.num_streams, opts.min_group_cost) == (True, 2, 3, 0.5)
    assert opts.precision == "f16" and opts.config == {"ENABLE_CPU_PINNING": False}
    assert parse_options({"float16": "False", "num_streams": None}).float16 is False
    assert parse_options({"precision": "default"}).precision is None


def test_bad_value_names_what_was_given_and_what_is_allowed():
    with pytest.raises(InvalidArgumentError, match=r"openvino provider: option num_threads=-1; expected an int >= 0"):
        parse_options({"num_threads": -1})
    with pytest.raises(InvalidArgumentError, match=r"option precision='f8'; expected one of \['f32', 'f16', 'bf16'\] "
                                                   r"or one of \['default'\]"):
        parse_options({"precision": "f8"})
