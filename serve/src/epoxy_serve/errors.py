"""Errors a server turns into protocol replies: each carries the HTTP status the Open Inference
Protocol gives it, so a user's mistake is a 4xx naming what was wrong, never a 500."""

from __future__ import annotations


class ServeError(Exception):
    """Base of the errors a server answers with; ``status`` is the HTTP status of the reply."""

    status = 500


class BadRequest(ServeError, ValueError):
    """The request is malformed or does not match the model (input name, datatype, shape, size)."""

    status = 400


class ModelNotFound(ServeError, LookupError):
    """No model (or no such version of it) is served under that name."""

    status = 404


class PayloadTooLarge(ServeError, ValueError):
    """The request body is over the server's limit."""

    status = 413


class ModelNotReady(ServeError, RuntimeError):
    """The model is known but cannot take requests now (loading, or its session failed)."""

    status = 503
