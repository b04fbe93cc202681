"""Checking a call on every rank, so that a bad call raises everywhere instead of hanging.

A collective deadlocks when one rank fails and the others wait for it.  So a rank that finds
a problem with its own arguments does not raise at once: every rank first describes its call
in a few integers (:class:`CallDescription`), the ranks combine these, and then *every* rank
raises the same exception if any rank had a problem or the ranks disagree on the count,
shape, dtype, op, algorithm (the one asked for and the one ``auto`` resolved to) or number
of servers.  Only on that error path is a pickled gather made, so that the message can name
each rank's values.

The descriptions are combined in one of two ways (chapter "Choosing an algorithm"):

* :func:`agree`: a small all-gather before any data moves.  Any transport can do it, but it
  is a collective of its own on every call, and for a 1 KiB message it costs about as much
  as MPI's whole allreduce.
* :func:`agree_in_band`: the description rides at the front of recursive doubling's
  messages, as a header reduced by element-wise minimum alongside the data.  A header
  ``[s, −s]`` reduces to ``[min s, −max s]``: every rank learns, after the same ⌊lg p⌋
  exchanges that reduce the data (two more to fold a p that is not a power of two),
  whether all ranks agreed.  Messages of a wrong length
  cannot overflow a buffer: the transport cuts them (:meth:`Communicator.recv_any`) and the
  header, which every message starts with, shows the disagreement.
"""

from __future__ import annotations

import functools
import math
import operator
import threading
from dataclasses import dataclass, field

import numpy as np

from . import arrays
from .algorithms._schedule import PowerOfTwoFold
from .comm import Communicator
from .cost import Terms, largest_power_of_two
from .ops import DTYPES, OP_NAMES, Op, check_op_for_dtype

_ERROR_TYPES = {1: TypeError, 2: ValueError}


@dataclass
class CallDescription:
    """What one rank asked for, and the problem it found locally, if any."""

    shape: tuple[int, ...] | None = None
    dtype: str | None = None
    kind: str | None = None  # one of KINDS: the transports move the two apart
    op: str | None = None
    algorithm: str | None = None
    servers: int | None = None
    resolved: str | None = None
    #: what auto chose across the nodes when it chose the hierarchical allreduce
    resolved_inner: str | None = None
    problem: Exception | None = field(default=None, repr=False)
    #: the layout options (chapter "Beyond one flat ring"), as given, if valid
    ranks_per_node: int | None = None
    nodes: tuple[int, ...] | None = None
    inner: str | None = None

    def _options(self, algorithms: tuple[str, ...]) -> int:
        """The algorithm's options as one integer: the servers alone as they are, else a
        hash of them all (a tuple of ints hashes alike in every process)."""
        if self.ranks_per_node is None and self.nodes is None and self.inner is None:
            return -1 if self.servers is None else self.servers
        none = -1  # hash(None) differs from process to process before Python 3.12
        return hash((none if self.servers is None else self.servers,
                     none if self.ranks_per_node is None else self.ranks_per_node,
                     self.nodes or (), _index(algorithms, self.inner)))

    def _signed(self, algorithms: tuple[str, ...]):
        # kept on the description: a cached call (api's plans) signs the same way every time
        memo = self.__dict__.get("_memo")
        if memo is not None and memo[0] is self.resolved and memo[1] is algorithms and \
                memo[2] is self.problem and memo[4] is self.resolved_inner:
            return memo[3]
        signed = _signature(_problem_code(self.problem), self.shape, self.dtype, self.kind,
                            self.op, self.algorithm, self._options(algorithms), self.resolved,
                            self.resolved_inner, algorithms)
        self.__dict__["_memo"] = (self.resolved, algorithms, self.problem, signed,
                                  self.resolved_inner)
        return signed

    def signature(self, algorithms: tuple[str, ...]) -> np.ndarray:
        """The description as int64s.  Equal calls give equal rows on every rank (a
        tuple of ints hashes the same way in every process).  Read-only and cached."""
        return self._signed(algorithms)[0]

    def header(self, algorithms: tuple[str, ...]) -> tuple[np.ndarray, bytes]:
        """The signature ``s`` as the header ``[s, −s]`` that :func:`agree_in_band` reduces
        by element-wise minimum, and the header's bytes.  Read-only and cached."""
        return self._signed(algorithms)[1:]

    def fields(self) -> dict[str, object]:
        return {
            "element count": None if self.shape is None else int(np.prod(self.shape, dtype=np.int64)),
            "shape": self.shape,
            "dtype": self.dtype,
            "array type": self.kind,
            "op": self.op,
            "algorithm": self.algorithm,
            "servers": self.servers,
            "ranks_per_node": self.ranks_per_node,
            "nodes": self.nodes,
            "inner algorithm": self.inner,
            "algorithm auto chose": self.resolved,
            "inner algorithm auto chose": self.resolved_inner,
        }


#: The integers in a call's signature (see :func:`_signature`).
SIGNATURE_LENGTH = 8
#: What :func:`agree_in_band` writes into a header's first integer (a problem code, 0 for a
#: good call) when a message's length is wrong although the headers matched: below every
#: code, so the minimum carries it to every rank, and every rank raises.
SPOILED = -1


#: What ``x`` may be: the same on every rank (a thread rank cannot take a tensor's message
#: into a numpy array, nor the reverse).
KINDS = ("numpy array", "torch tensor")


@functools.lru_cache(maxsize=256)
def _signature(problem, shape, dtype, kind, op, algorithm, options, resolved, resolved_inner,
               algorithms):
    known = shape if shape is not None else ()
    signature = np.array(
        [
            problem,
            math.prod(known) if shape is not None else -1,
            hash(known),
            _index(DTYPES, dtype) + len(DTYPES) * _index(KINDS, kind),  # dtype and kind
            _index(OP_NAMES, op),
            _index(algorithms, algorithm),
            options,
            # auto's choice, and its inner one across nodes (ranks whose models differ
            # could agree on the hierarchical allreduce and run different inner ones)
            _index(algorithms, resolved)
            + len(algorithms) * (_index(algorithms, resolved_inner) + 1),
        ],
        dtype=np.int64,
    )
    assert len(signature) == SIGNATURE_LENGTH
    header = np.concatenate([signature, -signature])
    signature.flags.writeable = header.flags.writeable = False
    return signature, header, header.tobytes()


def _problem_code(problem: Exception | None) -> int:
    if problem is None:
        return 0
    return 1 if isinstance(problem, TypeError) else 2


def _index(names: tuple[str, ...], name: str | None) -> int:
    return names.index(name) if name in names else -1


def describe(
    x, out, op, algorithm, servers, comm: Communicator, algorithms: tuple[str, ...], sharded,
    layout: dict | None = None, takes_layout=frozenset(),
) -> CallDescription:
    """Check one rank's arguments locally; record the first problem instead of raising.
    ``layout`` holds the call's ``ranks_per_node``, ``nodes`` and ``inner`` (for the
    algorithms in ``takes_layout``)."""
    servers = _integer(servers)
    call = CallDescription(op=op if isinstance(op, str) else None,
                           algorithm=algorithm if isinstance(algorithm, str) else None,
                           servers=servers if isinstance(servers, int)
                           and not isinstance(servers, bool) else None)
    try:
        if not arrays.is_array(x):
            raise TypeError(
                f"x must be a numpy.ndarray or a torch.Tensor, got {type(x).__name__}"
            )
        call.shape, call.dtype = tuple(x.shape), arrays.dtype_name(x)
        call.kind = KINDS[arrays.is_tensor(x)]
        bad = arrays.problem(x, written=out is x)
        if bad:
            raise TypeError(bad)
        if not isinstance(op, str):
            raise TypeError(f"op must be a name such as 'sum', got {type(op).__name__}")
        check_op_for_dtype(op, call.dtype)
        if algorithm not in algorithms:
            raise ValueError(
                f"unknown algorithm {algorithm!r}; choose one of {', '.join(algorithms)}"
            )
        _check_layout(call, layout or {}, algorithm, comm, algorithms, takes_layout)
        if servers is not None:
            if algorithm not in sharded:
                raise ValueError(
                    f"servers= applies only to {' and '.join(sorted(sharded))}, "
                    f"not to {algorithm!r}"
                )
            if isinstance(servers, bool) or not isinstance(servers, int) \
                    or not 1 <= servers <= comm.size:
                raise ValueError(
                    f"servers must be an integer from 1 to the number of ranks ({comm.size}), "
                    f"got {servers!r}"
                )
        if out is not None:
            _check_out(x, out)
        # raises TypeError if this transport cannot move x's kind (a CUDA tensor over gloo,
        # numpy over NCCL); a strided x travels as a contiguous copy, whose layout is the
        # library's (torch.from_numpy refuses x[::-1] itself)
        comm.native(x if arrays.is_contiguous(x) else
                    np.empty(0, x.dtype) if isinstance(x, np.ndarray) else x.new_empty(0))
    except (TypeError, ValueError) as problem:
        call.problem = problem
    except Exception as problem:  # anything unforeseen is still reported on every rank
        call.problem = TypeError(f"{type(problem).__name__}: {problem}")
    return call


def _check_layout(call: CallDescription, layout: dict, algorithm, comm: Communicator,
                  algorithms: tuple[str, ...], takes_layout) -> None:
    """The hierarchical allreduce's options (chapter "Beyond one flat ring"), recorded in
    ``call`` as far as they are valid, so that ranks that disagree on them are told."""
    given = {name: value for name, value in layout.items() if value is not None}
    if given and algorithm not in takes_layout:
        takers = [name for name in sorted(takes_layout) if name in algorithms]
        if set(given) - {"ranks_per_node"}:  # nodes= and inner=: the hierarchical allreduce's
            takers = [name for name in takers if name == "hierarchical"]
        raise ValueError(f"{', '.join(f'{name}=' for name in given)} applies only to "
                         f"{' and '.join(takers)}, not to {algorithm!r}")
    rpn, nodes, inner = (given.get(name) for name in ("ranks_per_node", "nodes", "inner"))
    if rpn is not None:
        rpn = _integer(rpn)
        if isinstance(rpn, bool) or not isinstance(rpn, int) or rpn < 1:
            raise ValueError(f"ranks_per_node must be a positive integer, got {rpn!r}")
        call.ranks_per_node = rpn
    if nodes is not None:
        if rpn is not None:
            raise ValueError("give ranks_per_node= or nodes=, not both")
        if algorithm != "hierarchical":
            raise ValueError(f"nodes= applies only to hierarchical, not to {algorithm!r}")
        try:
            ids = tuple(operator.index(i) for i in nodes)  # 0.5 is no node id
        except (TypeError, ValueError):
            raise TypeError("nodes must be a sequence of integers, one node id per rank") from None
        if len(ids) != comm.size:
            raise ValueError(f"nodes must give one node id per rank ({comm.size}), got {len(ids)}")
        call.nodes = ids
    if inner is not None:
        if algorithm != "hierarchical":
            raise ValueError(f"inner= applies only to hierarchical, not to {algorithm!r}")
        if inner not in algorithms or inner == "hierarchical":
            raise ValueError(f"unknown inner algorithm {inner!r}; choose one of "
                             f"{', '.join(a for a in algorithms if a != 'hierarchical')}")
        call.inner = inner


def _integer(value):
    """``value`` as a Python int when it is an integer (numpy's too: ``np.int64(2)``, as
    ``operator.index`` takes it), not a bool; otherwise unchanged, for the check to refuse."""
    if isinstance(value, (bool, np.bool_)):
        return value
    try:
        return operator.index(value)
    except Exception:  # noqa: BLE001 - not an integer: the check refuses it on every rank
        return value


def _check_out(x, out) -> None:
    if type(out) is not type(x):
        raise TypeError(f"out must be of the same type as x ({type(x).__name__}), "
                        f"got {type(out).__name__}")
    if tuple(out.shape) != tuple(x.shape) or arrays.dtype_name(out) != arrays.dtype_name(x):
        raise ValueError(
            f"out must have x's shape and dtype {tuple(x.shape)} {arrays.dtype_name(x)}, "
            f"got {tuple(out.shape)} {arrays.dtype_name(out)}"
        )
    if arrays.device(out) != arrays.device(x):
        raise TypeError(f"out is on {arrays.device(out)} but x is on {arrays.device(x)}")
    bad = arrays.problem(out, "out", written=True)
    if bad:
        raise TypeError(bad)


def agree(comm: Communicator, call: CallDescription, algorithms: tuple[str, ...]) -> None:
    """Return on every rank if every rank's call is valid and they all match; otherwise
    raise the same exception on every rank.  One all-gather of the descriptions."""
    table = comm.allgather_ints(call.signature(algorithms))
    if not table[:, 0].any() and (table == table[0]).all():
        return
    _raise_for(comm, call)


#: Largest buffer :func:`agree_in_band` carries with its header; beyond it copying the
#: data into and out of the packet costs more than the header's own rounds, and the header
#: travels alone.  ``allreduce.bench.micro --in-band`` measures both ways.  On the idle
#: 2-core reference machine (2026-11-26, three runs of 7 rounds each, the header-first
#: call's time over the carrying call's):
#:
#: * 4 ranks (two to a core): 1.31-1.47 at 8 KiB, 1.07-1.13 at 64 KiB, 0.79-1.04 at
#:   128 KiB, 0.90-1.02 at 256 KiB;
#: * 2 ranks (a core each): 1.18-1.24 at 8 KiB, 0.96-1.02 at 16 KiB, 0.80-0.85 at 64 KiB,
#:   0.53-0.56 at 256 KiB.
#:
#: So 64 KiB: carrying still wins there on the 4 ranks the benchmark targets, and above it
#: loses or ties on both.  (Until 2026-11-26 the limit was 1 MiB, from a noisier
#: measurement; the committed benchmark rows say which limit they ran with.)
IN_BAND_LIMIT = 64 << 10


def agree_in_band(comm: Communicator, call: CallDescription, algorithms: tuple[str, ...],
                  buf=None, op: Op | None = None, *, out=None) -> None:
    """:func:`agree`, by recursive doubling of the description over point-to-point messages,
    reducing the numpy array ``buf`` with ``op`` into ``out`` (default: ``buf`` itself) on
    the way when it is given.

    The result has the same bits as
    :func:`~allreduce.algorithms.recursive_doubling.recursive_doubling` gives.  Ranks may
    pass ``buf`` or ``None`` independently; a rank whose partner's header differs from its
    own stops reducing data, and every rank raises at the end.  Needs a transport with
    :attr:`~allreduce.comm.Communicator.receives_any_length`.
    """
    header, agreed = call.header(algorithms)
    mine, theirs, head, their_head, data, their_data = _packets(
        len(agreed), None if buf is None else buf.dtype, 0 if buf is None else buf.size)
    head[:] = header
    if buf is not None:
        data[:] = buf
    in_step = buf is not None  # false once a partner's header differs: data is then garbage

    def combine(exact: bool, incoming_first: bool) -> None:
        nonlocal in_step
        if their_head.tobytes() != agreed:
            in_step = False
            np.minimum(head, their_head, out=head)
        elif not exact:  # the headers match but not the lengths (one rank carries data, one
            in_step = False  # does not): spoil the header, so that every rank raises
            head[0] = min(head[0], SPOILED)
        elif in_step:
            comm.reduce_local(op, data, their_data, incoming_first=incoming_first)

    rank, size = comm.rank, comm.size
    if size & (size - 1) == 0:  # a power of two: no fold
        mask = 1
        while mask < size:
            partner = rank ^ mask
            combine(comm.sendrecv_any(mine, partner, theirs, partner), partner < rank)
            mask <<= 1
    else:
        fold = PowerOfTwoFold(comm)
        me, sits_out = fold.virtual_rank, rank < 2 * fold.extra
        if sits_out and rank % 2 == 0:
            comm.send_any(mine, rank + 1)  # hand over, then take the finished packet back;
            comm.recv_any(mine, rank + 1)  # its header says whether its data can be used
        else:
            if sits_out:
                combine(comm.recv_any(theirs, rank - 1), True)
            mask = 1
            while mask < fold.participants:
                partner = fold.real_rank(me ^ mask)
                combine(comm.sendrecv_any(mine, partner, theirs, partner), (me ^ mask) < me)
                mask <<= 1
            if sits_out:
                comm.send_any(mine, rank - 1)
    # [min s, −max s] equals this rank's own [s, −s] only if every rank's s equals s
    if call.problem is None and head.tobytes() == agreed:
        if buf is not None:
            (buf if out is None else out)[:] = data
        return
    _raise_for(comm, call)


_scratch = threading.local()  # each thread rank of the thread transport has its own packets


def _packets(head_bytes: int, dtype, count: int):
    """Buffers for :func:`agree_in_band`, reused from call to call (one allocation per
    size, not per call): the packet sent and the one received, each ``[header | data]``,
    and views on their parts."""
    cache = _scratch.__dict__
    key = (head_bytes, dtype, count)
    found = cache.get(key)
    if found is None:
        if len(cache) >= 16:
            cache.clear()
        length = head_bytes + (0 if dtype is None else count * np.dtype(dtype).itemsize)
        both = np.empty(2 * length, dtype=np.uint8)
        mine, theirs = both[:length], both[length:]
        views = [part[:head_bytes].view(np.int64) for part in (mine, theirs)]
        views += [None, None] if dtype is None else \
            [part[head_bytes:].view(dtype) for part in (mine, theirs)]
        found = cache[key] = (mine, theirs, *views)
    return found


def in_band_terms(algorithm: str, p: int, nbytes: int, limit: int | None = None) -> Terms:
    """What :func:`agree_in_band` adds to the cost terms of a call that runs ``algorithm``
    (``auto`` already resolved) on ``nbytes`` bytes per rank: the model's counts for the
    whole call are ``cost.terms(...)`` plus these.  Checked against traces of whole calls.

    Recursive doubling of at most ``limit`` bytes (default :data:`IN_BAND_LIMIT`; a
    benchmark row timed under another limit passes its own) carries the header in its own
    messages, which adds only the header's bytes; any other call first sends the header
    alone by recursive doubling: ⌊lg p⌋ steps, and two more to fold a non-power of two.
    Bytes are on the critical path: a folding rank receives the header, runs the rounds,
    and sends it back."""
    if p == 1:
        return Terms(0, 0, 0)
    participants = largest_power_of_two(p)
    folded = p != participants
    rounds = participants.bit_length() - 1
    header_bytes = 2 * SIGNATURE_LENGTH * np.dtype(np.int64).itemsize  # [s, −s]
    carried = (rounds + 2 * folded) * header_bytes
    if algorithm == "recursive_doubling" and nbytes <= (IN_BAND_LIMIT if limit is None else limit):
        return Terms(0, carried, 0)
    return Terms(rounds + 2 * folded, carried, 0)


def _raise_for(comm: Communicator, call: CallDescription) -> None:
    """The error path, on every rank: gather the full descriptions so that the message can
    name every rank's values, and raise."""
    raise_on_every_rank(comm, call.fields(), call.problem, "allreduce",
                        "Every rank must pass an array of the same shape and dtype, with the "
                        "same op and algorithm.",
                        RuntimeError("allreduce: the ranks' calls differ in a way this check "
                                     "cannot name"))


def raise_on_every_rank(comm: Communicator, fields: dict[str, object],
                        problem: Exception | None, caller: str, advice: str,
                        otherwise: Exception) -> None:
    """Raise the same exception on every rank (collective): the first rank's own problem if
    any rank found one, else the first field of ``fields`` on which the ranks disagree,
    naming each rank's value, else ``otherwise``.  Shared by the dense and sparse calls."""
    text = None if problem is None else f"{type(problem).__name__}: {problem}"
    everyone = comm.allgather_object((fields, text, _problem_code(problem)))
    failing = [rank for rank, (_, text, _) in enumerate(everyone) if text]
    if failing:
        details = "; ".join(f"rank {rank}: {everyone[rank][1]}" for rank in failing)
        raise _ERROR_TYPES[everyone[failing[0]][2]](
            f"{caller}: invalid call on {_ranks(failing)} ({details})"
        )
    for name in fields:
        groups: dict[str, list[int]] = {}
        for rank, (theirs, _, _) in enumerate(everyone):
            groups.setdefault(_show(theirs[name]), []).append(rank)
        if len(groups) > 1:
            listing = ", ".join(f"{value} on {_ranks(ranks)}" for value, ranks in groups.items())
            raise ValueError(f"{caller}: the ranks disagree on the {name}: {listing}. {advice}")
    raise otherwise


def _ranks(ranks: list[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def _show(value: object) -> str:
    return "none" if value is None else str(value)
