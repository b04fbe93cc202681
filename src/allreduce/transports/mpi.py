"""The mpi4py transport: numpy buffers moved with MPI's buffer API.

Every transfer goes through the upper-case methods (``Isend``, ``Irecv``, ``Sendrecv``) on a
byte view of the buffer, so no data is pickled and every dtype travels the same way,
float16 included.  CPU torch tensors are accepted too: they are moved through a numpy
view that shares their memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from mpi4py import MPI

from ..comm import Communicator


class MPICommunicator(Communicator):
    """An :class:`~allreduce.comm.Communicator` over an mpi4py intracommunicator."""

    def __init__(self, comm: MPI.Intracomm):
        if not isinstance(comm, MPI.Intracomm) or comm == MPI.COMM_NULL:
            raise TypeError(
                f"comm must be an mpi4py intracommunicator; got {type(comm).__name__}"
                + (" (COMM_NULL)" if comm == MPI.COMM_NULL else "")
            )
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self._status = MPI.Status()  # reused: a receive of any length reads its count here

    def isend(self, buf, dest: int, tag: int = 0) -> MPI.Request:
        return self.comm.Isend([buf, MPI.BYTE], dest, tag)

    def irecv(self, buf, source: int, tag: int = 0) -> MPI.Request:
        return self.comm.Irecv([buf, MPI.BYTE], source, tag)

    def waitall(self, requests: Sequence[MPI.Request]) -> None:
        MPI.Request.Waitall(list(requests))

    def wait(self, request: MPI.Request) -> None:
        request.Wait()

    def send(self, buf, dest: int, tag: int = 0) -> None:
        self.comm.Send([buf, MPI.BYTE], dest, tag)

    def recv(self, buf, source: int, tag: int = 0) -> None:
        self.comm.Recv([buf, MPI.BYTE], source, tag)

    def sendrecv(self, sendbuf, dest: int, recvbuf, source: int, tag: int = 0) -> None:
        self.comm.Sendrecv([sendbuf, MPI.BYTE], dest, tag, [recvbuf, MPI.BYTE], source, tag)

    receives_any_length = True  # Recv takes any message that fits, and says how long it was

    def send_any(self, buf, dest: int, tag: int = 0) -> None:
        self.send(buf, dest, tag)

    def recv_any(self, buf, source: int, tag: int = 0) -> bool:
        status = self._status
        try:
            self.comm.Recv([buf, MPI.BYTE], source, tag, status)
        # a longer message: MPI reports an overflow (MPI_ERR_TRUNCATE).  MPICH delivers what
        # fits; the standard does not promise it, but the check only needs False here: a
        # header it then reads wrong makes every rank raise all the same (validation.py)
        except MPI.Exception as error:
            if error.Get_error_class() != MPI.ERR_TRUNCATE:
                raise
            return False
        return status.Get_count(MPI.BYTE) == buf.nbytes

    def sendrecv_any(self, sendbuf, dest: int, recvbuf, source: int, tag: int = 0) -> bool:
        status = self._status
        try:
            self.comm.Sendrecv([sendbuf, MPI.BYTE], dest, tag, [recvbuf, MPI.BYTE], source, tag,
                               status)
        except MPI.Exception as error:
            if error.Get_error_class() != MPI.ERR_TRUNCATE:
                raise
            return False
        return status.Get_count(MPI.BYTE) == recvbuf.nbytes

    def barrier(self) -> None:
        self.comm.Barrier()

    def native(self, array):
        if isinstance(array, np.ndarray):
            return array
        if getattr(array, "is_cuda", False):
            raise TypeError(
                "a CUDA tensor cannot go over the mpi4py transport (it moves host memory); "
                "use a torch.distributed process group with the nccl backend"
            )
        return array.detach().numpy()  # a CPU tensor: a view on the same memory

    def allgather_ints(self, values: np.ndarray) -> np.ndarray:
        gathered = np.empty((self.size, values.size), dtype=np.int64)
        self.comm.Allgather(values, gathered)
        return gathered

    def allgather_object(self, obj: Any) -> list[Any]:
        return self.comm.allgather(obj)

    # -- groups (chapter "Beyond one flat ring") -------------------------------------------
    def _groups(self) -> dict:
        """The groups :meth:`split` made are kept *on the MPI communicator*, as one of its
        attributes (MPI's own cache), so every wrapper of it finds them, and they are freed
        with it.  One cache per wrapper class, so that a subclass gets groups of its kind."""
        kept = self.comm.Get_attr(_keyval())
        if kept is None:
            kept = {}
            self.comm.Set_attr(_keyval(), kept)
        return kept.setdefault(type(self), {})

    def _split(self, colors: tuple[int, ...], index: int) -> Communicator:
        # type(self): a subclass (the labs' patient communicator) keeps its behaviour
        return type(self)(self.comm.Split(colors[self.rank], self.rank))

    def _let_go(self, group: Communicator) -> None:
        """A group :meth:`split` no longer keeps: its communicator freed (every member lets
        it go at the same call, as ``MPI_Comm_free`` requires)."""
        if isinstance(group, MPICommunicator) and group.comm not in (self.comm, MPI.COMM_NULL):
            group.comm.Free()

    def nodes(self) -> tuple[int, ...]:
        """Which ranks share a node, as MPI sees it: ``MPI_Comm_split_type`` with
        ``COMM_TYPE_SHARED`` (the ranks that can share memory), asked once and kept."""
        from ..topology import Layout

        kept = self._groups()
        if "nodes" not in kept:
            shared = self.comm.Split_type(MPI.COMM_TYPE_SHARED, key=self.rank)
            first = shared.allreduce(self.rank, op=MPI.MIN)  # the node's lowest rank names it
            shared.Free()
            kept["nodes"] = Layout.of(self.comm.allgather(first)).node_of
        return kept["nodes"]


_KEYVAL: list[int] = []


def _free_groups(comm, keyval, kept) -> None:
    """MPI calls this when a communicator that kept groups is freed: free them too."""
    if MPI.Is_finalized():
        return
    for groups in kept.values():
        for group in groups.values():
            if isinstance(group, MPICommunicator) and group.comm not in (comm, MPI.COMM_NULL):
                group.comm.Free()


def _keyval() -> int:
    if not _KEYVAL:
        _KEYVAL.append(MPI.Comm.Create_keyval(delete_fn=_free_groups))
    return _KEYVAL[0]
