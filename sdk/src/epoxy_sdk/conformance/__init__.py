"""Conformance kit: the API scope (every provider must pass all of it) and the op scope
(ONNX backend node cases for the ops a provider claims, reported per op)."""
