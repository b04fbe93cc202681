"""Reduction operators and the dtype rules that go with them.

Every algorithm reduces with one of the operators below, through the communicator's
``reduce_local``; nothing else in the library knows how an operator is computed.  All
five are commutative and associative, which is what lets an allreduce combine partial
results in any order (chapter "Why gradients must be aggregated").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: The dtypes every transport moves and every algorithm reduces, by name.  The order is
#: part of the metadata exchanged between ranks (a dtype travels as its index here).
DTYPES: tuple[str, ...] = ("float16", "float32", "float64", "int32", "int64")
FLOAT_DTYPES = frozenset({"float16", "float32", "float64"})


@dataclass(frozen=True)
class Op:
    """A reduction operator.

    ``combine`` is the name of the element-wise function in both numpy and torch
    (``np.add``/``torch.add`` and so on).  ``mean`` is a sum followed by a division by
    the number of ranks, done once at the end by :func:`finish`.
    """

    name: str
    combine: str
    floating_only: bool = False


OPS: dict[str, Op] = {
    "sum": Op("sum", "add"),
    "mean": Op("mean", "add", floating_only=True),
    "max": Op("max", "maximum"),
    "min": Op("min", "minimum"),
    "prod": Op("prod", "multiply"),
}
OP_NAMES: tuple[str, ...] = tuple(OPS)


def check_op_for_dtype(op: str, dtype: str) -> None:
    """Raise ``ValueError`` for an unknown op, ``TypeError`` for one that makes no sense here."""
    if op not in OPS:
        raise ValueError(f"unknown op {op!r}; choose one of {', '.join(OP_NAMES)}")
    if dtype not in DTYPES:
        raise TypeError(
            f"dtype {dtype} is not supported; use one of {', '.join(DTYPES)}"
        )
    if OPS[op].floating_only and dtype not in FLOAT_DTYPES:
        raise TypeError(
            f"op {op!r} needs a floating-point dtype, got {dtype}: the mean of integers "
            "is not an integer. Cast to a float dtype first, or use op='sum'."
        )


#: The numpy function of each operator's ``combine``, looked up once (a call's hot path).
_NUMPY = {op.combine: getattr(np, op.combine) for op in OPS.values()}


def _function(op: Op, array):
    if isinstance(array, np.ndarray):
        return _NUMPY.get(op.combine) or getattr(np, op.combine)  # an Op made elsewhere too
    import torch

    return getattr(torch, op.combine)


def combine(op: Op, inout, incoming, *, incoming_first: bool = False, source=None) -> None:
    """``inout = inout (op) incoming`` in place, with no allocation (but for one element,
    below); with ``source``, ``inout = source (op) incoming``.

    ``incoming_first`` computes ``incoming (op) inout`` instead.  The operators here are
    commutative, so both give the same bits, NaN payloads apart (below); the flag lets an
    algorithm combine partial results in rank order, which is what an MPI library promises
    for non-commutative ops.

    With ``source``, the three-array form reduces ``source`` and ``incoming`` straight into
    ``inout``.  An earlier numpy (the course's machine, 256 KiB to 16 MiB) ran it at half the
    in-place form's speed, so the slice was copied in first; measured again with numpy 2.4.6
    (float32, CPU time per call, :func:`allreduce.bench.micro.combine_forms`), the three-array
    form is the faster at every size from 8 KiB to 8 MiB, by 1.3 to 1.65 times in three
    runs, on slices at odd offsets, so the copy is gone.  Both give the same bits.

    A one-element numpy array is combined into a new array and copied in: numpy 2.4's
    ``add`` of one element in place keeps the NaN of the operand that is *not* ``out`` (of
    two or more, the first operand's), so two ranks adding the same NaNs with ``out`` on
    different sides got different payloads.
    """
    function = _function(op, inout)
    first = inout if source is None else source
    if incoming_first:
        first, incoming = incoming, first
    if type(inout) is np.ndarray and inout.size == 1:  # (0-d too)
        inout[...] = function(first, incoming)
    else:
        function(first, incoming, out=inout)


def finish(op: Op, buffer, size: int) -> None:
    """The last step of an allreduce for this op: divide by the rank count for ``mean``."""
    if op.name == "mean" and size > 1:
        buffer /= size
