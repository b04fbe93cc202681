"""The public entry points: :func:`allreduce`, and the two phases :func:`reduce_scatter` and
:func:`allgather`, which the chapter "Ring allreduce" composes into an allreduce and the
chapter "Beyond one flat ring" calls apart (sharded data parallelism)."""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import arrays
from .algorithms import LAYOUT, PHASES, READS_SOURCE, REGISTRY, SHARDED
from .algorithms.auto import resolve
from .comm import Communicator
from .ops import OPS, finish
from .transports import as_communicator
from .validation import IN_BAND_LIMIT, agree, agree_in_band, describe

#: Every algorithm name :func:`allreduce` accepts, in the order the book teaches them.
ALGORITHMS: tuple[str, ...] = tuple(REGISTRY)
#: The algorithms whose phases :func:`reduce_scatter` and :func:`allgather` run.
PHASED: tuple[str, ...] = tuple(PHASES)


def _once(nodes):
    """``nodes`` as a tuple, read once: an iterator given for it would be empty by the time
    the algorithm reads it (the check reads it first); what is not iterable is left for the
    check to refuse."""
    if nodes is None or isinstance(nodes, tuple):
        return nodes
    try:
        return tuple(nodes)
    except TypeError:
        return nodes


def _checked(x, comm, op, algorithm, ranks_per_node, nodes) -> tuple[Communicator, dict]:
    """Wrap ``comm`` and check a phase's call on every rank (:mod:`allreduce.validation`):
    the communicator, and the layout options the phase takes, as checked (only the
    hierarchical one's: ints, not the caller's objects, as :func:`allreduce` passes them)."""
    communicator = as_communicator(comm)
    call = describe(x, out=None, op=op, algorithm=algorithm, servers=None, comm=communicator,
                    algorithms=PHASED, sharded=SHARDED,
                    layout={"ranks_per_node": ranks_per_node, "nodes": nodes},
                    takes_layout=LAYOUT)
    call.resolved = algorithm
    if call.problem is None:  # the phases work in x itself: every rank hears of a bad one
        if not arrays.is_contiguous(x):
            call.problem = ValueError(
                "reduce_scatter and allgather work in place: x must be contiguous")
        elif bad := arrays.problem(x, written=True):
            call.problem = TypeError(bad)
    agree(communicator, call, PHASED)
    checked = {"ranks_per_node": call.ranks_per_node, "nodes": call.nodes}
    taken = ({name: value for name, value in checked.items() if value is not None}
             if algorithm == "hierarchical" else {})
    return communicator, taken


def allreduce(
    x: Any,
    comm: Any,
    algorithm: str = "auto",
    op: str = "sum",
    out: Any = None,
    *,
    servers: int | None = None,
    ranks_per_node: int | None = None,
    nodes: Sequence[int] | None = None,
    inner: str | None = None,
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
    ranks_per_node, nodes, inner
        For ``hierarchical`` (chapter "Beyond one flat ring"): ``ranks_per_node``
        consecutive ranks to a node, or ``nodes``, one node id per rank (by default the
        communicator's own nodes: ``COMM_TYPE_SHARED`` under MPI); ``inner``, the algorithm
        across the nodes (default ``auto``).  ``auto`` with ``ranks_per_node`` chooses on
        two levels of links, the hierarchical allreduce among the candidates.

    Returns the result, of ``x``'s type, shape and dtype.  Every rank gets the same bits.

    Raises ``TypeError`` or ``ValueError`` on every rank, leaving ``out`` untouched, if any
    rank's call is invalid or the ranks' calls disagree (``RuntimeError`` if they differ
    in a way no field of the check names; see :mod:`allreduce.validation` and the chapter
    "The allreduce library").  A ``comm`` of the wrong kind raises ``TypeError`` at
    once: there is no communicator to agree over.
    """
    communicator = as_communicator(comm)
    if nodes is not None:
        nodes = _once(nodes)
    key = _plan_key(x, out, op, algorithm, servers, ranks_per_node, nodes, inner)
    plans = _PLANS.get(communicator) if key is not None else None
    plan = plans.get(key) if plans is not None else None
    if plan is None:  # describe() in full: a new kind of call, or a bad one
        layout = {"ranks_per_node": ranks_per_node, "nodes": nodes, "inner": inner}
        plan = _Plan(describe(x, out, op, algorithm, servers, communicator, ALGORITHMS, SHARDED,
                              layout, LAYOUT), servers)
        if key is not None and plan.call.problem is None:
            _keep(communicator, key, plan)
    call = plan.call
    in_band = communicator.receives_any_length
    carried = source = result = staging = buffer = reduce_op = None
    if call.problem is None:
        # auto chooses now, before the check, so that ranks which would choose differently
        # raise together (the choice is part of what they check) instead of hanging
        options = plan.options
        nbytes = arrays.nbytes(x)
        if algorithm == "auto":
            call.resolved, chosen = resolve(nbytes, communicator.size, call.ranks_per_node)
            call.resolved_inner = chosen.get("inner")  # checked too
            options = chosen  # resolve() keeps its answers: never changed here
        reduce_op = plan.reduce_op
        # the algorithms reduce a flat contiguous buffer in place: the result's own memory
        # when it is contiguous, otherwise a staging copy that is written back at the end
        # (and when out overlaps x without being x, which the algorithms would overwrite
        # before they read it)
        if out is None:
            result = staging = arrays.new_like(x)
        else:
            result = out
            staging = out if arrays.is_contiguous(out) and (
                out is x or not arrays.overlaps(out, x)) else arrays.new_like(x)
        buffer = communicator.native(arrays.flat_view(staging))
        if in_band and nbytes <= IN_BAND_LIMIT and call.resolved == "recursive_doubling":
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
        if source is not None:
            options = {**options, "source": source}  # a new dict: the plan's is kept
        REGISTRY[call.resolved](buffer, communicator, reduce_op, **options)
    finish(reduce_op, buffer, communicator.size)
    if staging is not result:
        arrays.copy_into(result, staging)
    return result


class _Plan:
    """What :func:`allreduce` works out once per kind of call: the checked description,
    the algorithm's options and the operator (chapter "The allreduce library")."""

    __slots__ = ("call", "options", "reduce_op")

    def __init__(self, call, servers):
        self.call = call
        self.options = {} if servers is None else {"servers": call.servers}  # an int
        if call.algorithm == "hierarchical":  # the checked values, not the caller's objects
            checked = {"ranks_per_node": call.ranks_per_node, "nodes": call.nodes,
                       "inner": call.inner}  # (a kept list the caller changes later)
            self.options.update({name: value for name, value in checked.items()
                                 if value is not None})
        self.reduce_op = None if call.problem else OPS[call.op]
        if call.problem is None and call.algorithm != "auto":
            call.resolved = call.algorithm


#: Plans of valid calls, per communicator (which holds its native object), by
#: :func:`_plan_key`: a call that matches one skips :func:`~allreduce.validation.describe`
#: (about 15 µs of Python); the ranks still check it.  Weak: a communicator that is gone
#: (a tracing wrapper, a group) takes its plans with it.
_PLANS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _keep(communicator: Communicator, key: tuple, plan: _Plan) -> None:
    try:
        plans = _PLANS.setdefault(communicator, {})
    except TypeError:  # a communicator that cannot be weakly referenced: no plans
        return
    if len(plans) >= 64:
        plans.clear()
    plans[key] = plan


def _plan_key(x, out, op, algorithm, servers, ranks_per_node, nodes, inner):
    """Everything :func:`~allreduce.validation.describe` checks but the communicator, as a
    key: the types of ``x`` and ``out``, the shape, dtype, device and strides of each and
    whether ``out`` may be written, the op, algorithm, servers and layout options; ``None``
    (no plan) for a call whose arguments cannot be keyed."""
    kind = type(x)
    if kind is not np.ndarray and not arrays.is_tensor(x):
        return None
    if nodes is not None:
        try:
            nodes = tuple(nodes)
            hash(nodes)
        except TypeError:
            return None
    if out is None:
        given = None
    elif type(out) is kind:  # and what says whether it may be written: the flag (numpy),
        try:  # and the strides (a broadcast view has a zero stride): arrays.problem's tests
            given = (out.shape, out.dtype, out.device, *((out.flags.writeable, out.strides)
                     if kind is np.ndarray else (out.layout, out.stride())))
        except Exception:  # noqa: BLE001 - describe() reports it, on every rank
            return None
    else:
        return None
    try:  # x's strides (a transport may refuse a layout: torch.from_numpy, negative ones),
        # and the options' types: ranks_per_node=True equals 1 as a key, but is refused
        # (a sparse tensor has strides, those of an expanded dense one: the layout tells)
        strides = x.strides if kind is np.ndarray else (x.layout, x.stride())
        key = (kind, x.shape, x.dtype, x.device, strides, given, op, algorithm, servers,
               type(servers), ranks_per_node, type(ranks_per_node), nodes, inner)
        hash(key)
    except (AttributeError, TypeError):
        return None
    return key


def reduce_scatter(x: Any, comm: Any, op: str = "sum", *, algorithm: str = "ring",
                   ranks_per_node: int | None = None,
                   nodes: Sequence[int] | None = None) -> tuple[int, int]:
    """Reduce-scatter of the contiguous array ``x``, in place: afterwards rank ``r`` holds
    chunk ``r`` of the flattened array reduced over all ranks, at the element range
    ``[lo, hi) = chunk_bounds(n, p, r)`` it returns, whichever the ``algorithm`` (one of
    :data:`PHASED`: the ring, Rabenseifner's recursive halving, the 2D ring and the
    hierarchical one, with ``ranks_per_node`` or ``nodes`` as in :func:`allreduce`).  The
    rest of ``x`` holds intermediate values.  For ``op="mean"`` the owned chunk is divided
    by the number of ranks.  Chapters "Ring allreduce" and "Beyond one flat ring".
    """
    nodes = _once(nodes)
    communicator, layout = _checked(x, comm, op, algorithm, ranks_per_node, nodes)
    buffer = communicator.native(arrays.flat_view(x))
    lo, hi = PHASES[algorithm][0](buffer, communicator, OPS[op], **layout)
    finish(OPS[op], buffer[lo:hi], communicator.size)
    return lo, hi


def allgather(x: Any, comm: Any, *, algorithm: str = "ring", ranks_per_node: int | None = None,
              nodes: Sequence[int] | None = None) -> Any:
    """All-gather of the contiguous array ``x``, in place: rank ``r`` contributes chunk
    ``r`` of the flattened array (``chunk_bounds(n, p, r)``, as :func:`reduce_scatter` leaves
    it, with the same ``algorithm`` and options) and ends with every rank's chunk.
    Returns ``x``."""
    nodes = _once(nodes)
    communicator, layout = _checked(x, comm, "max", algorithm, ranks_per_node, nodes)  # any dtype
    PHASES[algorithm][1](communicator.native(arrays.flat_view(x)), communicator, **layout)
    return x
