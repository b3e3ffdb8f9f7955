"""The one error class of calibration: bad calibration data, named by file, batch and input."""

from __future__ import annotations

from epoxy.errors import InvalidArgument


class CalibrationDataError(InvalidArgument, ValueError):
    """Calibration inputs that cannot be used: a missing or unreadable file, a feed that is
    not a dict of arrays, a batch without a model input.

    ``source`` is the file or batch (``"batch 3"``) and ``input`` the model input involved,
    when known; both are also in the message.
    """

    def __init__(self, message: str, *, source: str | None = None, input: str | None = None) -> None:
        super().__init__(message)
        self.source = source
        self.input = input
