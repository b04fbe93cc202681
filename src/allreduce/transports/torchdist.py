"""The torch.distributed transport: gloo for CPU tensors, nccl for CUDA tensors.

Transfers use ``dist.isend``/``dist.irecv`` with group-relative ranks, so any process group
works, not only the default one.  Buffers stay where they are: CUDA tensors never pass
through the host on the data path.  Over gloo, numpy arrays are accepted too and moved
through a tensor view that shares their memory.
"""

from __future__ import annotations

import atexit
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from ..comm import Communicator, members


class _Batch:
    """Sends and receives kept until a wait starts them together (see
    :meth:`TorchCommunicator._post`): waiting for any of them waits for all, once (a gloo
    send waited for twice waits for a second send)."""

    def __init__(self):
        self.ops: list[dist.P2POp] = []
        self.works: list | None = None

    def wait(self) -> None:  # (a batch dropped unstarted, see allgather_ints, has no works)
        works, self.works = self.works or [], []
        for work in works:
            work.wait()


class TorchCommunicator(Communicator):
    """An :class:`~allreduce.comm.Communicator` over a torch.distributed process group."""

    def __init__(self, group: dist.ProcessGroup | None = None):
        if not dist.is_initialized():
            raise TypeError(
                "torch.distributed is not initialised: call dist.init_process_group() "
                "before passing a process group"
            )
        self.group = group
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)
        self.backend = str(dist.get_backend(group))
        if self.rank < 0:
            raise TypeError("this process is not a member of the process group it passed")
        #: Start sends and receives in groups (see :meth:`_post`): needed on NCCL; on gloo a
        #: send starts at once, so that it overlaps the work before its wait.
        self.grouped = self.uses_cuda
        self._kept: _Batch | None = None

    @property
    def uses_cuda(self) -> bool:
        return self.backend == "nccl"

    def isend(self, buf, dest: int, tag: int = 0):
        if buf.numel() == 0:  # both sides know the length, and both skip it
            return None
        if self.grouped:
            return self._post(dist.P2POp(dist.isend, buf, group=self.group, group_peer=dest,
                                         tag=tag))
        return dist.isend(buf, group=self.group, group_dst=dest, tag=tag)

    def irecv(self, buf, source: int, tag: int = 0):
        if buf.numel() == 0:
            return None
        if self.grouped:
            return self._post(dist.P2POp(dist.irecv, buf, group=self.group,
                                         group_peer=source, tag=tag))
        return dist.irecv(buf, group=self.group, group_src=source, tag=tag)

    def _post(self, op: dist.P2POp) -> _Batch:
        """Keep ``op`` until the next wait (or collective), which starts every op kept so far
        as one group (``dist.batch_isend_irecv``, NCCL's ncclGroupStart/End).  An NCCL send
        or receive blocks the GPU until its peer's matching call, and those that "need to
        progress concurrently to complete ... must be fused" in a group (NCCL's API
        documentation, ncclSend): two ranks that each start a receive from the other before
        their send, as :meth:`sendrecv` does, would otherwise wait for each other forever."""
        if self._kept is None:
            self._kept = _Batch()
        self._kept.ops.append(op)
        return self._kept

    def _start_kept(self) -> None:
        if self._kept is not None:
            kept, self._kept = self._kept, None
            kept.works = dist.batch_isend_irecv(kept.ops)

    def waitall(self, requests: Sequence[Any]) -> None:
        self._start_kept()
        for request in requests:
            if request is not None:
                request.wait()

    def barrier(self) -> None:
        self._start_kept()
        dist.barrier(group=self.group)

    def native(self, array):
        if isinstance(array, np.ndarray):
            if self.uses_cuda:
                raise TypeError(
                    "the nccl backend moves CUDA tensors; got a numpy array "
                    "(move it to the GPU with torch.from_numpy(x).cuda())"
                )
            if array.flags.c_contiguous and any(stride < 0 for stride in array.strides):
                # on an axis of length 1: numpy calls the array contiguous whatever that
                # stride, torch refuses it (a reversed view of more is left to torch to refuse)
                array = np.lib.stride_tricks.as_strided(array, strides=_c_strides(array))
            return torch.from_numpy(array)
        if array.is_cuda != self.uses_cuda:
            where = "CUDA" if array.is_cuda else "CPU"
            raise TypeError(
                f"a {where} tensor cannot go over a {self.backend} process group: "
                "use gloo for CPU tensors and nccl for CUDA tensors"
            )
        return array

    def _device(self) -> torch.device:
        return torch.device("cuda", torch.cuda.current_device()) if self.uses_cuda else torch.device("cpu")

    def allgather_ints(self, values: np.ndarray) -> np.ndarray:
        # every call's check starts here, before its algorithm posts anything, and a sparse
        # call's later gathers (the dense path's count of zero sums)
        # come after every message before them was waited on: what is still kept was posted
        # by a call that raised before its wait, and no peer will match it
        self._kept = None
        mine = torch.tensor(values, dtype=torch.int64, device=self._device())
        gathered = [torch.empty_like(mine) for _ in range(self.size)]
        dist.all_gather(gathered, mine, group=self.group)
        return torch.stack(gathered).cpu().numpy()

    def allgather_object(self, obj: Any) -> list[Any]:
        self._start_kept()
        gathered: list[Any] = [None] * self.size
        dist.all_gather_object(gathered, obj, group=self.group)
        return gathered

    # -- groups (chapter "Beyond one flat ring") -------------------------------------------
    def _groups(self) -> dict:
        """Kept per process group (and per default group, so that a new
        ``init_process_group`` starts afresh): a ``new_group`` is a rendezvous."""
        return _KEPT.setdefault((dist.group.WORLD, self.group, self.grouped), {})

    def _split(self, colors: tuple[int, ...], index: int) -> Communicator:
        """On the default group: a torch group per colour, every rank calling ``new_group``
        for every colour in the same order (torch's rule for ``new_group``: every process of
        the default group enters it, members or not), each set of ranks made once per process
        and kept.  On a group of its own (which the other ranks of the default group do not
        enter), the generic group over this group's messages (:class:`SubCommunicator`).

        Not ``use_local_synchronization=True``, which would let only the members enter:
        measured with torch 2.13 and gloo on 3 processes, after ranks 0-1 make a group
        together, ranks 0 and 2 then hang making theirs (tests/torchdist, chapter 65)."""
        if self.group not in (None, dist.group.WORLD):
            return super()._split(colors, index)
        made = _MADE.setdefault(dist.group.WORLD, {})
        mine = members(colors, self.rank)
        new = mine not in made
        for color in sorted(set(colors)):
            ranks = tuple(r for r, c in enumerate(colors) if c == color)
            if ranks not in made:
                made[ranks] = dist.new_group(list(ranks))
        child = TorchCommunicator(made[mine])
        child.grouped = self.grouped
        if new and child.grouped:  # torch: a group's first batched send and receive must
            child.barrier()  # involve all its ranks, so a collective of all of them comes first
        return child

    def nodes(self) -> tuple[int, ...]:
        """Which ranks share a node: those of one torchrun agent (``GROUP_RANK``, the node
        rank torchrun's rendezvous assigns), else of one host name.  Asked once, kept."""
        import os
        import socket

        from ..topology import Layout

        kept = self._groups()
        if "nodes" not in kept:
            mine = os.environ.get("GROUP_RANK") or socket.gethostname()
            kept["nodes"] = Layout.of(self.allgather_object(mine)).node_of
        return kept["nodes"]


def _c_strides(array: np.ndarray) -> tuple[int, ...]:
    """The strides of a C-contiguous array of ``array``'s shape and dtype."""
    strides, step = [], array.itemsize
    for length in reversed(array.shape):
        strides.append(step)
        step *= max(length, 1)
    return tuple(reversed(strides))


_KEPT: dict = {}  # (default group, group) → {colours: TorchCommunicator, "nodes": layout}
_MADE: dict = {}  # default group → {global ranks: the process group made for them}


@atexit.register
def _let_go_at_exit() -> None:
    """Drop the groups kept above while the interpreter is still whole.  Left to its
    teardown, gloo aborted the process ("terminate called without an active exception",
    SIGABRT) in 2 to 4 of 6 to 8 runs under torchrun, after a script had split groups and
    called ``destroy_process_group`` (torch 2.13, 3 processes; 0 of 8 with this)."""
    _KEPT.clear()
    _MADE.clear()


def init_from_mpi(comm, backend: str = "gloo") -> None:
    """Start torch.distributed's default process group on the processes of the mpi4py
    communicator ``comm``, with their MPI ranks: rank 0 picks a free local port and MPI
    broadcasts it (one machine; ``MASTER_ADDR`` defaults to 127.0.0.1).  What the
    benchmark's gloo peer, the capstone's DDP run and the labs' engines use."""
    import os
    import socket

    port = None
    if comm.rank == 0:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(comm.bcast(port))
    dist.init_process_group(backend, rank=comm.rank, world_size=comm.size)
