"""The public entry points: :func:`allreduce`, and the ring's :func:`reduce_scatter` and
:func:`allgather`, which the chapter "Ring allreduce" composes into an allreduce."""

from __future__ import annotations

from typing import Any

from . import arrays
from .algorithms import READS_SOURCE, REGISTRY, SHARDED
from .algorithms.auto import choose
from .algorithms.ring import allgather as ring_allgather
from .algorithms.ring import reduce_scatter as ring_reduce_scatter
from .comm import Communicator
from .ops import OPS, finish
from .transports import as_communicator
from .validation import IN_BAND_LIMIT, agree, agree_in_band, describe

#: Every algorithm name :func:`allreduce` accepts, in the order the book teaches them.
ALGORITHMS: tuple[str, ...] = tuple(REGISTRY)


def _checked(x, comm, op, algorithm, out=None, servers=None) -> Communicator:
    """Wrap ``comm`` and check the call on every rank (see :mod:`allreduce.validation`)."""
    communicator = as_communicator(comm)
    call = describe(x, out, op, algorithm, servers, communicator, ALGORITHMS, SHARDED)
    call.resolved = algorithm
    agree(communicator, call, ALGORITHMS)
    return communicator


def allreduce(
    x: Any,
    comm: Any,
    algorithm: str = "auto",
    op: str = "sum",
    out: Any = None,
    *,
    servers: int | None = None,
) -> Any:
    """Reduce ``x`` over every rank of ``comm`` and give every rank the result.

    Parameters
    ----------
    x
        A numpy array or torch tensor of any shape, of dtype float16, float32, float64,
        int32 or int64; the same shape and dtype on every rank.
    comm
        An mpi4py intracommunicator, a torch.distributed process group, or an
        :class:`allreduce.Communicator`.
    algorithm
        One of :data:`ALGORITHMS`.
    op
        ``"sum"``, ``"mean"`` (floating dtypes only), ``"max"``, ``"min"`` or ``"prod"``.
    out
        Where to write the result: ``None`` for a new array, ``x`` itself to work in place,
        or another array of ``x``'s type, shape and dtype.
    servers
        Number of server ranks for ``parameter_server`` (default 1) and
        ``sharded_parameter_server`` (default all ranks).

    Returns the result, of ``x``'s type, shape and dtype.  Every rank gets the same bits.

    Raises ``TypeError`` or ``ValueError`` on every rank, leaving ``out`` untouched, if any
    rank's call is invalid or the ranks' calls disagree (see :mod:`allreduce.validation`
    and the chapter "The allreduce library").  A ``comm`` of the wrong kind raises ``TypeError`` at
    once: there is no communicator to agree over.
    """
    communicator = as_communicator(comm)
    call = describe(x, out, op, algorithm, servers, communicator, ALGORITHMS, SHARDED)
    in_band = communicator.receives_any_length
    carried = source = result = staging = buffer = reduce_op = None
    if call.problem is None:
        # auto chooses now, before the check, so that ranks which would choose differently
        # raise together (the choice is part of what they check) instead of hanging
        call.resolved = choose(arrays.nbytes(x), communicator.size) if algorithm == "auto" \
            else algorithm
        reduce_op = OPS[op]
        result = arrays.new_like(x) if out is None else out
        # the algorithms reduce a flat contiguous buffer in place: the result's own memory
        # when it is contiguous, otherwise a staging copy that is written back at the end
        staging = result if arrays.is_contiguous(result) else arrays.new_like(x)
        buffer = communicator.native(arrays.flat_view(staging))
        if in_band and call.resolved == "recursive_doubling" and \
                arrays.nbytes(x) <= IN_BAND_LIMIT:
            carried = arrays.host_view(communicator.native(x))
        if carried is not None:
            carried = carried.reshape(-1)  # x's memory, or a flat copy if x is strided
        elif staging is not x and call.resolved in READS_SOURCE and arrays.is_contiguous(x):
            source = communicator.native(arrays.flat_view(x))  # read in place, no copy
    if in_band:
        # the check travels with recursive doubling's data; other algorithms run after it
        agree_in_band(communicator, call, ALGORITHMS, carried, reduce_op,
                      out=None if carried is None else arrays.host_view(buffer))
    else:
        agree(communicator, call, ALGORITHMS)
    if carried is None and source is None and staging is not x:
        arrays.copy_into(staging, x)  # only now: a call that raised leaves out untouched
    if carried is None and arrays.count(buffer):
        options = {} if servers is None else {"servers": servers}
        if source is not None:
            options["source"] = source
        REGISTRY[call.resolved](buffer, communicator, reduce_op, **options)
    finish(reduce_op, buffer, communicator.size)
    if staging is not result:
        arrays.copy_into(result, staging)
    return result


def _flat_in_place(x):
    if not arrays.is_contiguous(x):
        raise ValueError("reduce_scatter and allgather work in place: x must be contiguous")
    return arrays.flat_view(x)


def reduce_scatter(x: Any, comm: Any, op: str = "sum") -> tuple[int, int]:
    """Ring reduce-scatter of the contiguous array ``x``, in place (chapter "Ring allreduce").

    Afterwards rank ``r`` holds chunk ``r`` of the flattened array reduced over all ranks,
    at the element range ``[lo, hi)`` it returns; the other chunks hold partial results.
    For ``op="mean"`` the owned chunk is divided by the number of ranks.
    """
    communicator = _checked(x, comm, op, "ring")
    buffer = communicator.native(_flat_in_place(x))
    lo, hi = ring_reduce_scatter(buffer, communicator, OPS[op])
    finish(OPS[op], buffer[lo:hi], communicator.size)
    return lo, hi


def allgather(x: Any, comm: Any) -> Any:
    """Ring all-gather of the contiguous array ``x``, in place (chapter "Ring allreduce").

    Rank ``r`` contributes chunk ``r`` of the flattened array (as left by
    :func:`reduce_scatter`) and ends with every rank's chunk.  Returns ``x``.
    """
    communicator = _checked(x, comm, "max", "ring")  # "max" is valid for every dtype
    ring_allgather(communicator.native(_flat_in_place(x)), communicator)
    return x
