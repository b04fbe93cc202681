"""Checking a call on every rank before any data moves.

A collective deadlocks when one rank fails and the others wait for it.  So a rank that finds
a problem with its own arguments does not raise at once: every rank first describes its call
in a few integers (:class:`CallDescription`), the ranks exchange these in one small
all-gather, and then *every* rank raises the same exception if any rank had a problem or the
ranks disagree on the count, shape, dtype, op, algorithm or number of servers.  Only on that
error path is a second, pickled gather made, so that the message can name each rank's
values.
"""

from __future__ import annotations

import math

from dataclasses import dataclass, field

import numpy as np

from . import arrays
from .comm import Communicator
from .ops import DTYPES, OP_NAMES, check_op_for_dtype

_ERROR_TYPES = {1: TypeError, 2: ValueError}


@dataclass
class CallDescription:
    """What one rank asked for, and the problem it found locally, if any."""

    shape: tuple[int, ...] | None = None
    dtype: str | None = None
    op: str | None = None
    algorithm: str | None = None
    servers: int | None = None
    problem: Exception | None = field(default=None, repr=False)

    def signature(self, algorithms: tuple[str, ...]) -> np.ndarray:
        """The description as int64s.  Equal calls give equal rows on every rank (a
        tuple of ints hashes the same way in every process)."""
        shape = self.shape if self.shape is not None else ()
        return np.array(
            [
                _problem_code(self.problem),
                math.prod(shape) if self.shape is not None else -1,
                hash(shape),
                _index(DTYPES, self.dtype),
                _index(OP_NAMES, self.op),
                _index(algorithms, self.algorithm),
                -1 if self.servers is None else self.servers,
            ],
            dtype=np.int64,
        )

    def fields(self) -> dict[str, object]:
        return {
            "element count": None if self.shape is None else int(np.prod(self.shape, dtype=np.int64)),
            "shape": self.shape,
            "dtype": self.dtype,
            "op": self.op,
            "algorithm": self.algorithm,
            "servers": self.servers,
        }


def _problem_code(problem: Exception | None) -> int:
    if problem is None:
        return 0
    return 1 if isinstance(problem, TypeError) else 2


def _index(names: tuple[str, ...], name: str | None) -> int:
    return names.index(name) if name in names else -1


def describe(
    x, out, op, algorithm, servers, comm: Communicator, algorithms: tuple[str, ...], sharded
) -> CallDescription:
    """Check one rank's arguments locally; record the first problem instead of raising."""
    call = CallDescription(op=op if isinstance(op, str) else None,
                           algorithm=algorithm if isinstance(algorithm, str) else None,
                           servers=servers if isinstance(servers, int) else None)
    try:
        if not arrays.is_array(x):
            raise TypeError(
                f"x must be a numpy.ndarray or a torch.Tensor, got {type(x).__name__}"
            )
        call.shape, call.dtype = tuple(x.shape), arrays.dtype_name(x)
        if not isinstance(op, str):
            raise TypeError(f"op must be a name such as 'sum', got {type(op).__name__}")
        check_op_for_dtype(op, call.dtype)
        if algorithm not in algorithms:
            raise ValueError(
                f"unknown algorithm {algorithm!r}; choose one of {', '.join(algorithms)}"
            )
        if servers is not None:
            if algorithm not in sharded:
                raise ValueError(
                    f"servers= applies only to {' and '.join(sorted(sharded))}, "
                    f"not to {algorithm!r}"
                )
            if not isinstance(servers, int) or not 1 <= servers <= comm.size:
                raise ValueError(
                    f"servers must be an integer from 1 to the number of ranks ({comm.size}), "
                    f"got {servers!r}"
                )
        if out is not None:
            _check_out(x, out)
        comm.native(x)  # raises TypeError if this transport cannot move x
    except (TypeError, ValueError) as problem:
        call.problem = problem
    except Exception as problem:  # anything unforeseen is still reported on every rank
        call.problem = TypeError(f"{type(problem).__name__}: {problem}")
    return call


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


def agree(comm: Communicator, call: CallDescription, algorithms: tuple[str, ...]) -> None:
    """Return on every rank if every rank's call is valid and they all match; otherwise
    raise the same exception on every rank."""
    table = comm.allgather_ints(call.signature(algorithms))
    problems = table[:, 0]
    if not problems.any() and (table == table[0]).all():
        return
    # the error path: gather the full descriptions so the message can name every value
    problem = None if call.problem is None else f"{type(call.problem).__name__}: {call.problem}"
    everyone = comm.allgather_object((call.fields(), problem))
    failing = [rank for rank, (_, problem) in enumerate(everyone) if problem]
    if failing:
        details = "; ".join(f"rank {rank}: {everyone[rank][1]}" for rank in failing)
        raise _ERROR_TYPES[int(problems[failing[0]])](
            f"allreduce: invalid call on {_ranks(failing)} ({details})"
        )
    for name in call.fields():
        groups: dict[str, list[int]] = {}
        for rank, (fields, _) in enumerate(everyone):
            groups.setdefault(_show(fields[name]), []).append(rank)
        if len(groups) > 1:
            listing = ", ".join(f"{value} on {_ranks(ranks)}" for value, ranks in groups.items())
            raise ValueError(
                f"allreduce: the ranks disagree on the {name}: {listing}. Every rank must pass "
                "an array of the same shape and dtype, with the same op and algorithm."
            )
    raise RuntimeError("allreduce: the ranks' calls differ in a way this check cannot name")


def _ranks(ranks: list[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def _show(value: object) -> str:
    return "none" if value is None else str(value)
