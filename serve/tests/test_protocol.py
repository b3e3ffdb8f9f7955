"""The Open Inference Protocol codec without any server: request bodies built by tritonclient's
own builder decode to the same arrays, replies parse back in tritonclient, bad bodies are
BadRequest naming what is wrong, and oversized ones PayloadTooLarge."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
import tritonclient.http as httpclient

from epoxy_serve import BadRequest, PayloadTooLarge, ServedModel
from epoxy_serve.protocol import (
    HEADER_LENGTH,
    InferRequest,
    MethodNotAllowed,
    RequestedOutput,
    RouteNotFound,
    decode_request,
    encode_error,
    encode_response,
    match,
)

LIMIT = 1 << 20
RNG = np.random.default_rng(7)
ARRAYS = {
    "FP32": RNG.standard_normal((2, 3)).astype(np.float32),
    "FP16": RNG.standard_normal((4,)).astype(np.float16),
    "INT64": RNG.integers(-(1 << 40), 1 << 40, (3, 2)),
    "INT8": RNG.integers(-128, 127, (5,)).astype(np.int8),
    "BOOL": RNG.integers(0, 2, (2, 2)).astype(bool),
    "BYTES": np.array([[b"abc", b""], [b"\xc3\xa9t\xc3\xa9", b"z" * 40]], dtype=object),
}


def _build(arrays: dict[str, np.ndarray], binary: bool, outputs: list[tuple[str, bool]] | None = None,
           request_id: str = "") -> tuple[bytes, dict[str, str]]:
    inputs = []
    for name, array in arrays.items():
        datatype = "BYTES" if array.dtype == object else httpclient.np_to_triton_dtype(array.dtype)
        item = httpclient.InferInput(name, list(array.shape), datatype)
        item.set_data_from_numpy(array, binary_data=binary)
        inputs.append(item)
    wanted = [httpclient.InferRequestedOutput(n, binary_data=b) for n, b in outputs] if outputs is not None else None
    body, json_size = httpclient.InferenceServerClient.generate_request_body(inputs, outputs=wanted,
                                                                             request_id=request_id)
    headers = {} if json_size is None else {"Inference-Header-Content-Length": str(json_size)}
    return body, headers


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_tritonclient_request_decodes_to_the_same_arrays(binary: bool) -> None:
    body, headers = _build(ARRAYS, binary, outputs=[("out", True), ("other", False)], request_id="req-7")
    assert (HEADER_LENGTH.title() in headers) == binary
    request = decode_request(body, headers, max_bytes=LIMIT)
    assert request.id == "req-7"
    assert request.outputs == (RequestedOutput("out", True), RequestedOutput("other", False))
    assert list(request.inputs) == list(ARRAYS)
    for name, want in ARRAYS.items():
        got = request.inputs[name]
        assert got.shape == want.shape and got.dtype == want.dtype, name
        assert np.array_equal(got, want), name


def test_nested_json_data_is_row_major() -> None:
    body = json.dumps({"inputs": [{"name": "x", "datatype": "INT32", "shape": [2, 2], "data": [[1, 2], [3, 4]]}]})
    request = decode_request(body.encode(), {}, max_bytes=LIMIT)
    assert request.inputs["x"].tolist() == [[1, 2], [3, 4]] and request.outputs is None


@pytest.mark.parametrize("mode", ["json", "binary", "binary_data_output"])
def test_reply_parses_in_tritonclient(mode: str) -> None:
    outputs = {"logits": ARRAYS["FP32"], "ids": ARRAYS["INT64"], "names": ARRAYS["BYTES"]}
    wanted = None if mode == "binary_data_output" else tuple(
        RequestedOutput(n, mode == "binary") for n in ("names", "logits", "ids"))
    request = InferRequest({}, wanted, id="abc", binary_default=mode == "binary_data_output")
    body, headers = encode_response("m", "3", outputs, request)
    length = headers.get(HEADER_LENGTH)
    assert (length is not None) == (mode != "json")
    result = httpclient.InferenceServerClient.parse_response_body(
        body, header_length=int(length) if length else None)
    reply = result.get_response()
    assert reply["model_name"] == "m" and reply["model_version"] == "3" and reply["id"] == "abc"
    order = ["names", "logits", "ids"] if wanted else list(outputs)
    assert [o["name"] for o in reply["outputs"]] == order
    for name, want in outputs.items():
        got = result.as_numpy(name)
        if got.dtype == object:  # tritonclient gives JSON BYTES back as str
            got = np.array([v.encode() if isinstance(v, str) else v for v in got.reshape(-1)],
                           dtype=object).reshape(got.shape)
        assert got.shape == want.shape, name
        assert np.array_equal(got, want), name


def test_only_requested_outputs_and_unknown_output() -> None:
    request = InferRequest({}, (RequestedOutput("b", False),))
    body, _ = encode_response("m", "1", {"a": np.zeros(1, np.float32), "b": np.ones(2, np.int32)}, request)
    assert [o["name"] for o in json.loads(body)["outputs"]] == ["b"]
    with pytest.raises(BadRequest, match="'nope'"):
        InferRequest({}, (RequestedOutput("nope", False),)).selected(["a", "b"])


def test_gzip_body() -> None:
    body, headers = _build({"x": ARRAYS["FP32"]}, True)
    request = decode_request(gzip.compress(body), {**headers, "Content-Encoding": "gzip"}, max_bytes=LIMIT)
    assert np.array_equal(request.inputs["x"], ARRAYS["FP32"])


def _entry(**fields: object) -> bytes:
    entry = {"name": "x", "datatype": "FP32", "shape": [2], "data": [1.0, 2.0], **fields}
    return json.dumps({"inputs": [{k: v for k, v in entry.items() if v is not None}]}).encode()


def _split(json_part: bytes) -> dict[str, str]:
    return {HEADER_LENGTH: str(len(json_part))}


@pytest.mark.parametrize("body, headers, words", [
    (b"{not json", {}, "not valid JSON"),
    (b"[1, 2]", {}, "JSON object"),
    (b'{"inputs": []}', {}, "non-empty 'inputs'"),
    (_entry(datatype="FLOAT"), {}, "'x': unknown datatype 'FLOAT'"),
    (_entry(shape=[3]), {}, "'x': shape holds 3 elements, data has 2"),
    (_entry(shape=[-1]), {}, "'x'"),
    (_entry(data=["a", "b"]), {}, "'x': FP32 data holds 'a'"),
    (_entry(datatype="INT8", data=[1, 1000]), {}, "'x': data does not fit INT8"),
    (_entry(datatype="UINT8", data=[True, 1]), {}, "'x'"),
    (_entry(data=None), {}, "'x': no 'data'"),
    (_entry(), {HEADER_LENGTH: "100000"}, "outside the body"),
    (_entry(data=None, parameters={"binary_data_size": 8}),
     _split(_entry(data=None, parameters={"binary_data_size": 8})), "'x': binary_data_size 8 runs past"),
    (_entry(data=None, parameters={"binary_data_size": 12}) + b"\0" * 12,
     _split(_entry(data=None, parameters={"binary_data_size": 12})), "'x': shape [2] of FP32 needs 8 bytes"),
    (_entry() + b"\0" * 4, {"Inference-Header-Content-Length": str(len(_entry()))}, "4 bytes of binary data"),
    (_entry(), {"Inference-Header-Content-Length": "ten"}, "must be an integer"),
    (_entry(), {"Content-Encoding": "br"}, "unsupported Content-Encoding 'br'"),
    (_entry(), {"Content-Encoding": "gzip"}, "not valid gzip"),
    (json.dumps({"id": 5, "inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [1]}]}).encode(), {},
     "'id' must be a string"),
])
def test_bad_bodies_name_what_is_wrong(body: bytes, headers: dict[str, str], words: str) -> None:
    with pytest.raises(BadRequest) as info:
        decode_request(body, headers, max_bytes=LIMIT)
    assert words in str(info.value)
    status, reply = encode_error(info.value)
    assert status == 400 and words in json.loads(reply)["error"]


def test_binary_header_must_cover_the_json() -> None:
    body, headers = _build({"x": ARRAYS["FP32"]}, True)
    with pytest.raises(BadRequest):
        decode_request(body, {HEADER_LENGTH: str(int(headers["Inference-Header-Content-Length"]) - 3)}, max_bytes=LIMIT)


def test_payload_limit_before_and_after_decompression() -> None:
    with pytest.raises(PayloadTooLarge) as info:
        decode_request(b"x" * (LIMIT + 1), {}, max_bytes=LIMIT)
    assert encode_error(info.value)[0] == 413
    bomb = gzip.compress(_entry()[:-3] + b" " * (2 * LIMIT) + _entry()[-3:])
    assert len(bomb) < LIMIT
    with pytest.raises(PayloadTooLarge, match="decompressed"):
        decode_request(bomb, {"content-encoding": "gzip"}, max_bytes=LIMIT)


def test_unexpected_error_is_500_in_the_protocol_shape() -> None:
    status, body = encode_error(RuntimeError("boom"))
    assert status == 500 and "boom" in json.loads(body)["error"]


@pytest.mark.parametrize("method, path, kind, model, version", [
    ("GET", "/v2", "server_metadata", None, None),
    ("GET", "/v2/health/live", "live", None, None),
    ("GET", "/v2/health/ready", "ready", None, None),
    ("GET", "/metrics", "metrics", None, None),
    ("GET", "/v2/models/cnn", "model_metadata", "cnn", None),
    ("GET", "/v2/models/cnn/versions/2", "model_metadata", "cnn", "2"),
    ("GET", "/v2/models/cnn/versions/2/ready", "model_ready", "cnn", "2"),
    ("GET", "/v2/models/cnn/config", "model_config", "cnn", None),
    ("POST", "/v2/models/cnn/infer", "infer", "cnn", None),
    ("POST", "/v2/models/cnn/versions/1/infer", "infer", "cnn", "1"),
])
def test_routes(method: str, path: str, kind: str, model: str | None, version: str | None) -> None:
    route = match(method, path)
    assert (route.kind, route.model, route.version) == (kind, model, version)


def test_unknown_route_404_and_wrong_method_405() -> None:
    with pytest.raises(RouteNotFound) as info:
        match("GET", "/v1/models/x")
    assert info.value.status == 404
    with pytest.raises(MethodNotAllowed, match="use POST") as wrong:
        match("GET", "/v2/models/x/infer")
    assert wrong.value.status == 405


def test_decoded_feeds_checked_by_the_model_name_the_input(cnn_bytes: bytes) -> None:
    model = ServedModel("cnn", cnn_bytes)
    good = RNG.standard_normal((2, 3, 16, 16)).astype(np.float32)
    body, headers = _build({"image": good.astype(np.float64)}, True)
    with pytest.raises(BadRequest, match="'image': datatype FP64.*expects FP32"):
        model.check(decode_request(body, headers, max_bytes=LIMIT).inputs)
    body, headers = _build({"image": good[:, :, :8]}, False)
    with pytest.raises(BadRequest, match="'image': shape"):
        model.check(decode_request(body, headers, max_bytes=LIMIT).inputs)
    body, headers = _build({"image": good}, True)
    out = model.infer(decode_request(body, headers, max_bytes=LIMIT).inputs)
    assert out["logits"].shape == (2, 10)
