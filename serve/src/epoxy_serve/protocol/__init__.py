"""The Open Inference Protocol v2 (KServe v2) with Triton's binary tensor extension, as pure
functions: decode a request's bytes, encode a reply's, match a route. No engine imports here."""

from .codec import (
                    HEADER_LENGTH,
                    InferRequest,
                    RequestedOutput,
                    decode_request,
                    encode_error,
                    encode_json,
                    encode_response,
)
from .routes import MethodNotAllowed, Route, RouteNotFound, match

__all__ = ["HEADER_LENGTH", "InferRequest", "MethodNotAllowed", "RequestedOutput", "Route", "RouteNotFound",
           "decode_request", "encode_error", "encode_json", "encode_response", "match"]
