"""``run()`` hands back C-ordered arrays whatever layout a kernel returned (ep-cpu's int8
convolution returns an NCHW view of channels-last codes), and leaves C-ordered results alone."""

from __future__ import annotations

import numpy as np

from epoxy.run.output_safety import detach_aliases


def test_strided_and_fortran_results_come_back_c_ordered() -> None:
    base = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)
    view = base.transpose(0, 3, 1, 2)  # a view: base set
    fortran = np.asfortranarray(np.arange(12.0).reshape(3, 4))  # owns its memory, F order
    plain = np.ones((2, 2), np.float32)
    out = detach_aliases([view, fortran, plain], [], set())
    for got, want in zip(out, (view, fortran, plain)):
        assert got.flags.c_contiguous
        np.testing.assert_array_equal(got, want)
    assert out[2] is plain  # already C-ordered and unshared: returned as it is
    [alone] = detach_aliases([fortran], [], set())  # owns its memory: the fast path's case
    assert alone.flags.c_contiguous
