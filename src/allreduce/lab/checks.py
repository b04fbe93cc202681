"""The values of the algorithm exercises' checks: the student's function runs through a
checking communicator (:func:`facade`), against the sum the check computes itself; its
communication pattern is checked apart (:mod:`allreduce.lab.patterns`).

A check has three parts, kept apart so that the grader can run them in different places
(:mod:`allreduce.grading`): :func:`inputs` makes every rank's data and the expected result,
:func:`run` calls the student's function on one rank, and :func:`judge` says what is wrong
with one rank's result.  :func:`allreduce.lab.engines.check` runs all three on the engines,
for a lab's check cell.
"""

from __future__ import annotations

import numpy as np

from ..algorithms._schedule import chunk_bounds
from ..comm import Communicator
from .patterns import sparse_supports

# A check runs for several sizes (CHECK_COUNTS, including ones p does not divide) of what a
# function should do (a key of PHASES).  Inputs are contribution bit sets (rank r adds 2**r)
# above which each element carries a number only that rank knows, so "actual" says exactly
# which ranks' data a chunk holds.  In the grader, where each rank has a sandbox of its own,
# no rank can produce the sum without receiving the others' data through the judge; the
# lab's engines share a machine (its /tmp, its loopback), so there a student could pass the
# data another way: a check cell is practice, the grader's verdict is the grade.

CHECK_COUNTS = (1, 3, 4, 7, 12, 1001)
#: The dtype of the cases above, and the other one every check also runs (at the largest
#: count): gradients are float32, and a function that allocates its scratch or its packets
#: in int64 (or float64) whatever ``buf`` holds is right for the first cases only.  Both hold
#: the bit sets exactly: float32 takes fewer secret bits (:func:`inputs`).
CHECK_DTYPE, OTHER_DTYPE = "int64", "float32"
PHASES = ("reduce_scatter", "allgather", "reduce_to_root", "allreduce", "average_gradients",
          "sparse_reduce_scatter", "zero2_step")
#: The learning rates of the ZeRO-2 step's check, one drawn per case: powers of two, with
#: weights that are multiples of 4, so that the weights less ``lr`` times the sum stay exact
#: even in float32; drawn, so that a step that leaves ``lr`` out, or writes one of them in,
#: is wrong.
ZERO2_LRS = (1, 2, 4)
#: Its weights and gradients in the cases :func:`cases` lists in :data:`CHECK_DTYPE`.
ZERO2_DTYPE = "float64"


def _ranks(bits: int, size: int) -> str:
    bits &= (1 << size) - 1
    if bits == (1 << size) - 1:
        return f"all {size} ranks"
    names = [rank for rank in range(size) if bits >> rank & 1]
    return f"rank{'s' * (len(names) > 1)} " + "+".join(map(str, names)) if names else "nothing"


def inputs(phase: str, n: int, size: int, rng: np.random.Generator, dtype: str = CHECK_DTYPE):
    """Every rank's data for one case, and what the result must be: ``(given, expected)``,
    ``given[rank]`` a dict of named arrays, of ``dtype`` (the gradients of
    ``average_gradients`` are float64 whatever it says, and ``zero2_step``'s weights and
    gradients float64 where it says int64); ``expected`` is exact, in int64 (float64 for the
    gradients' means; for ``zero2_step`` a dict of the weights after the step and the
    gradients' sum)."""
    bits = _secret_bits(size, dtype)
    if not bits:
        raise ValueError(f"{size} ranks leave {dtype} too few bits for a check's secrets")
    if phase == "sparse_reduce_scatter":  # the supports fix the pattern; the values are secret
        supports = sparse_supports(n, size)
        values = [rng.integers(1, 1 << bits, len(s)).astype(dtype) for s in supports]
        expected = np.zeros(n, np.int64)
        for indices, mine in zip(supports, values):
            expected[indices] += mine.astype(np.int64)
        return [{"indices": i, "values": v, "n": np.array([n])}
                for i, v in zip(supports, values)], expected
    if phase == "zero2_step":  # float gradients (the buffer's bit sets) and one set of weights
        dtype = ZERO2_DTYPE if dtype == CHECK_DTYPE else dtype
        secret = rng.integers(0, 1 << bits, (size, n))
        grads = [(1 << rank) + (secret[rank] << size) for rank in range(size)]
        total = np.sum(grads, axis=0, dtype=np.int64)  # below 2**24 in float32
        weights = 4 * rng.integers(0, 1 << (bits + size - 2), n)  # below it too
        lr = int(rng.choice(ZERO2_LRS))
        return ([{"weights": weights.astype(dtype), "grads": g.astype(dtype),
                  "lr": np.array([float(lr)])} for g in grads],
                {"weights": weights - lr * total, "sum": total, "lr": lr})
    if phase == "average_gradients":
        shapes = [(n,), (2, n), (n, 3, 1)]
        grads = [[rng.integers(-8, 9, shape).astype(np.float64) for shape in shapes]
                 for _ in range(size)]
        means = [sum(g[i] for g in grads) / size for i in range(len(shapes))]
        return [{f"g{i}": g for i, g in enumerate(mine)} for mine in grads], means
    secret = rng.integers(0, 1 << bits, (size, n))
    mine = [(1 << rank) + (secret[rank] << size) for rank in range(size)]
    expected = np.sum(mine, axis=0, dtype=np.int64)
    if phase == "allgather":  # each rank starts with only its own chunk, finished
        given = []
        for rank in range(size):
            buf = np.zeros(n, dtype=dtype)
            lo, hi = chunk_bounds(n, size, rank)
            buf[lo:hi] = expected[lo:hi]
            given.append({"buf": buf})
        return given, expected
    return [{"buf": m.astype(dtype)} for m in mine], expected


def cases(phase: str, size: int, counts=CHECK_COUNTS) -> list[tuple[int, str]]:
    """A check's cases on ``size`` ranks, ``(n, dtype)``: every count in
    :data:`CHECK_DTYPE` (:data:`ZERO2_DTYPE` for ``zero2_step``), then the
    largest in :data:`OTHER_DTYPE` where its significand
    leaves room for the secrets (up to 12 ranks), not for ``average_gradients`` (whose
    gradients are float64 in every case)."""
    counts = list(counts)
    other = [(max(counts), OTHER_DTYPE)] if counts and phase != "average_gradients" \
        and _secret_bits(size, OTHER_DTYPE) else []
    return [(n, CHECK_DTYPE) for n in counts] + other


def described(phase: str, size: int, counts=CHECK_COUNTS) -> str:
    """The cases of :func:`cases` in a check's passing line."""
    listed = cases(phase, size, counts)
    line = "n = " + ", ".join(str(n) for n, dtype in listed if dtype == CHECK_DTYPE)
    others = [n for n, dtype in listed if dtype != CHECK_DTYPE]
    return line + (f", and {OTHER_DTYPE} for n = {others[0]}" if others else "")


#: Failures that say what went wrong other than a dtype: :func:`in_dtype` adds no hint.
NOT_THE_DTYPE = ("did not finish", "deadlock", "MemoryError", "ended without answering",
                 "interrupted", "made more than", "did not read", "were sent and not received",
                 "used up the exercise", "spoke out of turn", "unknown request",
                 "never made", "twice in one wait", "broke the grader's protocol",
                 "different collectives", "malformed", "addressed rank")


def in_dtype(problem: str | None, phase: str, dtype: str) -> str | None:
    """``problem`` of a case in :data:`OTHER_DTYPE`, saying so: the same function was right
    on the cases before, so what differs is the dtype (unless the problem says otherwise)."""
    if not problem or dtype == CHECK_DTYPE or any(word in problem for word in NOT_THE_DTYPE):
        return problem
    arrays = {"sparse_reduce_scatter": "`values`", "zero2_step": "the weights"}.get(phase, "`buf`")
    first = ZERO2_DTYPE if phase == "zero2_step" else CHECK_DTYPE
    return (f"{problem} [in {dtype}, after the {first} cases were right: does it make "
            f"arrays of another dtype than {arrays}?]")


def _secret_bits(size: int, dtype: str) -> int:
    """How many secret bits each element can carry on ``size`` ranks so that any sum of the
    ranks' values (the rank bits below them included) is exact in ``dtype``: 20 in int64, in
    float32 what its 24-bit significand leaves (17 on 4 ranks, 12 on 8); 0 where that is
    fewer than 8 (13 ranks and more), too few to keep a rank's data secret."""
    if np.dtype(dtype).kind != "f":
        return 20
    bits = min(20, np.finfo(dtype).nmant + 1 - size - size.bit_length())
    return bits if bits >= 8 else 0


def run(phase: str, function, comm, given: dict) -> dict:
    """Call the student's ``function`` on one rank as ``phase`` says; what it left behind."""
    from ..ops import OPS

    if phase == "average_gradients":
        grads = [given[f"g{i}"].copy() for i in range(len(given))]
        return {"result": function(grads, comm)}
    if phase == "zero2_step":  # on flat torch tensors, as the lab's training gives them
        import torch

        weights, grads = (torch.from_numpy(given[k].copy()) for k in ("weights", "grads"))
        function(weights, grads, comm, float(given["lr"][0]))
        return {"weights": weights.numpy()}
    if phase == "sparse_reduce_scatter":
        result = function(given["indices"].copy(), given["values"].copy(), int(given["n"][0]),
                          comm)
        try:
            indices, values = result
            return {"indices": np.asarray(indices), "values": np.asarray(values)}
        except (TypeError, ValueError):
            return {"returned": repr(result)[:80]}
    buf = given["buf"].copy()
    if phase == "reduce_scatter":
        return {"buf": buf, "returned": function(buf, comm, OPS["sum"])}
    if phase == "allgather":
        function(buf, comm)
    elif phase == "reduce_to_root":
        function(buf, comm, OPS["sum"], np.empty_like(buf))
    else:
        function(buf, comm, OPS["sum"])
    return {"buf": buf}


def _first_wrong(name: str, n: int, rank: int, size: int, buf, expected, chunk: int) -> str | None:
    lo, hi = chunk_bounds(n, size, chunk)
    if getattr(buf, "shape", None) != expected.shape:
        return (f"{name}: rank {rank}'s buffer has shape {getattr(buf, 'shape', None)} for "
                f"n = {n} on {size} ranks, expected {expected.shape}")
    bad = np.flatnonzero(buf[lo:hi] != expected[lo:hi])
    if not len(bad):
        return None
    i = lo + int(bad[0])
    where = (f"{name} is wrong for n = {n} on {size} ranks: rank {rank}, chunk {chunk} "
             f"(elements {lo}..{hi - 1}), element {i}: expected the data of "
             f"{_ranks(int(expected[i]), size)}, got")
    value = buf[i]
    if not np.isfinite(value) or value != np.round(value):  # no sum of the inputs: no bits
        return f"{where} {value}"
    got = int(value)  # its low bits say whose data it holds (the rest is only theirs)
    what = _ranks(got, size)
    what = what if what == "nothing" else f"the data of {what}"
    if got & ((1 << size) - 1) == int(expected[i]) & ((1 << size) - 1):
        what += " (but not their data: was it computed without receiving it?)"
    return f"{where} {what}"


def _all_chunks_wrong(name, n, rank, size, buf, expected) -> str | None:
    return next((problem for c in range(size)
                 if (problem := _first_wrong(name, n, rank, size, buf, expected, c))), None)


def judge(phase: str, name: str, n: int, rank: int, size: int, got: dict, expected) -> str | None:
    """What is wrong with what ``run`` left on ``rank`` (``None``: nothing)."""
    if phase == "average_gradients":
        result = got.get("result")
        if not isinstance(result, (list, tuple)) or len(result) != len(expected):
            return (f"{name} returned {type(result).__name__} on rank {rank} for n = {n} on "
                    f"{size} ranks; it should return a list of {len(expected)} arrays")
        for index, (mine, want) in enumerate(zip(result, expected)):
            mine = np.asarray(mine)
            if mine.shape != want.shape:
                return (f"{name}: gradient {index} has shape {mine.shape} on rank {rank} for "
                        f"n = {n} on {size} ranks, expected {want.shape}")
            bad = np.argwhere(mine != want)
            if len(bad):
                where = tuple(int(i) for i in bad[0])
                return (f"{name} is wrong for n = {n} on {size} ranks: rank {rank}, gradient "
                        f"{index}, element {where}: expected the mean {want[where]}, got "
                        f"{mine[where]}")
        return None
    if phase == "sparse_reduce_scatter":
        return _sparse_chunk_wrong(name, n, rank, size, got, expected)
    if phase == "zero2_step":
        return _zero2_wrong(name, n, rank, size, got.get("weights"), expected)
    buf = got.get("buf")
    if phase == "reduce_scatter":
        returned, bounds = got.get("returned"), chunk_bounds(n, size, rank)
        try:
            right = returned is not None and tuple(int(b) for b in returned) == bounds
        except (TypeError, ValueError):
            right = False
        if not right:
            return (f"{name} returned {returned} on rank {rank} for n = {n} on {size} ranks; "
                    f"it should return "
                    f"the bounds of chunk {rank}, {bounds}")
        return _first_wrong(name, n, rank, size, buf, expected, rank)
    if phase == "reduce_to_root" and rank:
        return None  # only the root's result is defined
    return _all_chunks_wrong(name, n, rank, size, buf, expected)


def _zero2_wrong(name, n, rank, size, weights, expected) -> str | None:
    want = expected["weights"]
    if getattr(weights, "shape", None) != want.shape:
        return (f"{name}: rank {rank}'s weights have shape {getattr(weights, 'shape', None)} "
                f"after the step for n = {n} on {size} ranks, expected {want.shape}")
    bad = np.flatnonzero(weights != want)
    if not len(bad):
        return None
    i, lr = int(bad[0]), expected["lr"]
    chunk = next(c for c in range(size) if chunk_bounds(n, size, c)[1] > i)
    lo, hi = chunk_bounds(n, size, chunk)
    why = ""
    if weights[i] == want[i] + lr * expected["sum"][i]:  # as the step found it
        why = (" (not updated: its own chunk, which it must update)" if chunk == rank else
               " (not updated: did the all-gather bring it from its owner?)")
    return (f"{name} is wrong for n = {n} on {size} ranks: rank {rank}, chunk {chunk} "
            f"(elements {lo}..{hi - 1}, rank {chunk}'s to update), element {i}: expected "
            f"the weight less lr = {lr} times the sum of the ranks' gradients, "
            f"{want[i]}, got {weights[i]}{why}")


def _sparse_chunk_wrong(name, n, rank, size, got, expected) -> str | None:
    lo, hi = chunk_bounds(n, size, rank)
    if "indices" not in got:
        return (f"{name} returned {got.get('returned')} on rank {rank} for n = {n} on {size} "
                f"ranks; it should "
                f"return the pair (indices, values) of chunk {rank}, elements {lo}..{hi - 1}")
    indices, values = (np.asarray(got.get(k)) for k in ("indices", "values"))
    want = np.flatnonzero(expected[lo:hi]) + lo  # every value is positive: no sum is zero
    if indices.shape != want.shape or not np.array_equal(indices, want):
        return (f"{name} is wrong for n = {n} on {size} ranks: rank {rank} returned indices "
                f"{_short(indices)} for chunk {rank} (elements {lo}..{hi - 1}); the union of "
                f"the ranks' supports there is {_short(want)}")
    bad = np.flatnonzero(values != expected[want]) if values.shape == want.shape else [0]
    if len(bad):
        i = int(bad[0])
        shown = values[i] if values.shape == want.shape else f"{len(values)} values"
        return (f"{name} is wrong for n = {n} on {size} ranks: rank {rank}, index {want[i]}: "
                f"expected the sum {expected[want[i]]}, got {shown}")
    return None


def _short(array) -> str:
    items = [int(v) if isinstance(v, (int, np.integer)) else v
             for v in np.asarray(array).ravel()[:6]]
    return str(items)[:-1] + (", ...]" if np.size(array) > 6 else "]")


# -- the checking communicator ------------------------------------------------------------------

def facade(target: Communicator, trusted) -> Communicator:
    """A communicator that does what ``target`` does and offers nothing else: no attribute
    leads to ``target`` or to a raw MPI communicator (the student's function gets this).
    Its calls run inside ``trusted()`` (see :class:`~allreduce.lab.guard.Guard`)."""

    class CheckingCommunicator(Communicator):
        __slots__ = ()
        rank, size = target.rank, target.size
        receives_any_length = False

        def isend(self, buf, dest: int, tag: int = 0):
            with trusted():
                return target.isend(buf, dest, tag)

        def irecv(self, buf, source: int, tag: int = 0):
            with trusted():
                return target.irecv(buf, source, tag)

        def waitall(self, requests) -> None:
            with trusted():
                target.waitall(list(requests))

        def barrier(self) -> None:
            with trusted():
                target.barrier()

        def reduce_local(self, op, inout, incoming, *, incoming_first=False, source=None):
            with trusted():
                target.reduce_local(op, inout, incoming, incoming_first=incoming_first,
                                    source=source)

        def native(self, array):
            return target.native(array)

        def allgather_ints(self, values):
            with trusted():
                return target.allgather_ints(values)

        def allgather_object(self, obj):
            with trusted():
                return target.allgather_object(obj)

        def split(self, colors):  # a group of these ranks, checked the same way
            with trusted():
                return facade(target.split(colors), trusted)

        def nodes(self):
            with trusted():
                return target.nodes()

    return CheckingCommunicator()
