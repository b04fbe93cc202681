"""``dense``: densify, run the dense allreduce (``auto``), keep the nonzero entries.  The
baseline every sparse algorithm is measured against.

Cost: the dense allreduce's, on n values, whatever the density."""

from __future__ import annotations

import numpy as np

from ..comm import Communicator
from .vector import nonzero


def dense(indices, values, n: int, comm: Communicator, *, dense_output: bool = False):
    """The sum as a dense array when ``dense_output``, else as its nonzero entries."""
    from ..api import allreduce

    full = np.zeros(n, values.dtype)
    full[indices] = values
    allreduce(full, comm, algorithm="auto", out=full)
    if dense_output:
        return full
    where = np.flatnonzero(full != 0)
    return nonzero(where, full[where])
