"""``dense``: densify, run the dense allreduce (``auto``), and read the result back at the
union of the supports, which a second allreduce of a presence mask finds.  The baseline
every sparse algorithm is measured against; with ``dense_output`` the mask is not needed.

Cost: the dense allreduce's on n values, plus one on n int32 flags for the support."""

from __future__ import annotations

import numpy as np

from ..comm import Communicator
from .vector import densify


def dense(indices, values, n: int, comm: Communicator, *, dense_output: bool = False):
    """The sum as a dense array when ``dense_output``, else as ``(indices, values)`` on the
    union of the ranks' supports."""
    from ..api import allreduce

    full = densify(indices, values, n)
    allreduce(full, comm, algorithm="auto", out=full)
    if dense_output:
        return full
    present = np.zeros(n, np.int32)
    present[indices] = 1
    allreduce(present, comm, algorithm="auto", op="max", out=present)
    where = np.flatnonzero(present)
    return where, full[where]
