"""Inside the sandbox, a rank's side of the judge (:mod:`allreduce.grading.judge`): the
communicator its function is given, whose every send and receive is a message to the
judge, ``allreduce.allreduce``, which the judge computes, and ``allreduce.reduce_scatter``
and ``allreduce.allgather`` for the exercise that uses them (lab 65's ZeRO-2 step).  Nothing
here is trusted."""

from __future__ import annotations

import json

import numpy as np

from ..comm import Communicator, SubCommunicator, members


def judged_allreduce(owner):
    """``allreduce.allreduce`` for the rank ``owner``: the judge sums what every rank sends
    (and counts the calls, for the exercises whose pattern is one allreduce)."""

    def allreduce(x, comm=None, algorithm: str = "auto", op: str = "sum", out=None, *,
                  servers=None):
        is_torch = type(x).__module__.startswith("torch")
        data = np.ascontiguousarray(x.detach().cpu().numpy() if is_torch else np.asarray(x))
        _, blobs = owner.ask({"op": "allreduce", "dtype": data.dtype.name,
                              "count": int(data.size), "reduce": str(op)}, [data.tobytes()])
        result = np.frombuffer(blobs[0], dtype=data.dtype).reshape(data.shape)
        if out is None:
            if is_torch:
                import torch

                return torch.from_numpy(result.copy()).to(x.device)
            return result.copy()
        if type(out).__module__.startswith("torch"):
            import torch

            out.copy_(torch.from_numpy(result.copy()).view_as(out))
        else:
            out[...] = result
        return out

    return allreduce


def reduce_scatter(x, comm, op: str = "sum", *, algorithm: str = "ring",
                   ranks_per_node=None, nodes=None):
    """``allreduce.reduce_scatter`` in a graded run: the ring's, whose messages go through
    the judge as the student's own would (the check compares them with the library's ring,
    ``algorithm="ring"``, less its call check's header)."""
    from ..algorithms import ring  # in the plan of the run that offers this (confine.plan)
    from ..ops import OPS, finish

    buffer = _ring_buffer("reduce_scatter", x, comm, op, algorithm, ranks_per_node, nodes)
    lo, hi = ring.taught_reduce_scatter(buffer, comm, OPS[op])
    finish(OPS[op], buffer[lo:hi], comm.size)
    return lo, hi


def allgather(x, comm, *, algorithm: str = "ring", ranks_per_node=None, nodes=None):
    """``allreduce.allgather`` in a graded run: the ring's (see :func:`reduce_scatter`)."""
    from ..algorithms import ring

    ring.allgather(_ring_buffer("allgather", x, comm, "max", algorithm, ranks_per_node, nodes),
                   comm)
    return x


def _ring_buffer(name: str, x, comm, op: str, algorithm: str, ranks_per_node, nodes):
    """``x`` as the ring moves it, once the call is one the library takes (its messages for
    a bad op or dtype) and one a graded run has (the ring's, with no layout)."""
    from ..arrays import flat_view
    from ..ops import check_op_for_dtype

    if algorithm != "ring" or ranks_per_node is not None or nodes is not None:
        given = ", ".join(f"{key}={value!r}" for key, value in (
            ("algorithm", algorithm), ("ranks_per_node", ranks_per_node), ("nodes", nodes))
            if value is not None)
        raise ValueError(f"allreduce.{name}: a graded run has the ring's only (the default, "
                         f"algorithm='ring', with no ranks_per_node or nodes), not {given}")
    check_op_for_dtype(op, str(x.dtype).removeprefix("torch."))
    if not (x.flags.c_contiguous if isinstance(x, np.ndarray) else x.is_contiguous()):
        raise ValueError(f"allreduce.{name}: x must be contiguous (it works in place)")
    return comm.native(flat_view(x))


class HubCommunicator(Communicator):
    """The rank's side of the judge's communicator: the judge matches the sends and receives
    as MPI does and hands the data over."""

    def __init__(self, owner, rank: int, size: int):
        self._owner, self.rank, self.size = owner, rank, size

    def isend(self, buf, dest, tag=0):
        data, owner = self.native(buf), self._owner
        owner.requests += 1
        owner.send({"op": "isend", "id": owner.requests, "peer": int(dest), "tag": int(tag),
                    "dtype": data.dtype.name, "count": int(data.size)}, [data.tobytes()])
        return owner.requests, None

    def irecv(self, buf, source, tag=0):
        data, owner = self.native(buf), self._owner
        owner.requests += 1
        owner.send({"op": "irecv", "id": owner.requests, "peer": int(source), "tag": int(tag),
                    "dtype": data.dtype.name, "count": int(data.size)})
        return owner.requests, data

    def waitall(self, requests):
        requests = list(requests)
        _, blobs = self._owner.ask({"op": "wait", "ids": [r[0] for r in requests]})
        received = [r for r in requests if r[1] is not None]
        for (_, buf), blob in zip(received, blobs, strict=True):
            buf[...] = np.frombuffer(blob, dtype=buf.dtype).reshape(buf.shape)

    def barrier(self):
        self._owner.ask({"op": "barrier"})

    def _split(self, colors, index):
        return HubGroup(self, members(colors, self.rank), index)

    def native(self, array):
        if type(array).__module__.startswith("torch"):
            array = array.detach().numpy()
        if not isinstance(array, np.ndarray) or not array.flags.c_contiguous:
            raise TypeError("comm moves contiguous numpy arrays (a slice buf[lo:hi] of a 1-D "
                            "array is one)")
        return array

    def allgather_ints(self, values):
        reply, _ = self._owner.ask({"op": "allgather", "value": [int(v) for v in values]})
        return np.array(reply["values"], dtype=np.int64)

    def allgather_object(self, obj):
        reply, _ = self._owner.ask({"op": "allgather", "value": obj})
        # JSON has no tuples: a value equal to this rank's own comes back as it was
        plain = json.loads(json.dumps(obj))
        return [obj if value == plain else value for value in reply["values"]]


class HubGroup(SubCommunicator):
    """A group of the judge's ranks (``comm.split``), talking through the judge's messages.
    Its barrier does nothing: as a group of MPI ranks it would be MPI's own, which no
    exercise's pattern counts, where here it would be messages the judge counts (a lab 65
    solution that called ``node.barrier()`` failed its pattern).  The judge matches every
    send with its receive, so no rank sees another's data before it is sent, barrier or
    not."""

    def barrier(self) -> None:
        pass

    _split = HubCommunicator._split  # its groups are groups of the judge's ranks too
