"""The torch.distributed transport: gloo for CPU tensors, nccl for CUDA tensors.

Transfers use ``dist.isend``/``dist.irecv`` with group-relative ranks, so any process group
works, not only the default one.  Buffers stay where they are: CUDA tensors never pass
through the host on the data path.  Over gloo, numpy arrays are accepted too and moved
through a tensor view that shares their memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from ..comm import Communicator, members


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

    @property
    def uses_cuda(self) -> bool:
        return self.backend == "nccl"

    def isend(self, buf, dest: int, tag: int = 0):
        if buf.numel() == 0:  # both sides know the length, and both skip it
            return None
        return dist.isend(buf, group=self.group, group_dst=dest, tag=tag)

    def irecv(self, buf, source: int, tag: int = 0):
        if buf.numel() == 0:
            return None
        return dist.irecv(buf, group=self.group, group_src=source, tag=tag)

    def waitall(self, requests: Sequence[Any]) -> None:
        for request in requests:
            if request is not None:
                request.wait()

    def barrier(self) -> None:
        dist.barrier(group=self.group)

    def native(self, array):
        if isinstance(array, np.ndarray):
            if self.uses_cuda:
                raise TypeError(
                    "the nccl backend moves CUDA tensors; got a numpy array "
                    "(move it to the GPU with torch.from_numpy(x).cuda())"
                )
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
        mine = torch.tensor(values, dtype=torch.int64, device=self._device())
        gathered = [torch.empty_like(mine) for _ in range(self.size)]
        dist.all_gather(gathered, mine, group=self.group)
        return torch.stack(gathered).cpu().numpy()

    def allgather_object(self, obj: Any) -> list[Any]:
        gathered: list[Any] = [None] * self.size
        dist.all_gather_object(gathered, obj, group=self.group)
        return gathered

    # -- groups (chapter "Beyond one flat ring") -------------------------------------------
    def _groups(self) -> dict:
        """Kept per process group (and per default group, so that a new
        ``init_process_group`` starts afresh): a ``new_group`` is a rendezvous."""
        return _KEPT.setdefault((dist.group.WORLD, self.group), {})

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
        for color in sorted(set(colors)):
            ranks = tuple(r for r, c in enumerate(colors) if c == color)
            if ranks not in made:
                made[ranks] = dist.new_group(list(ranks))
        return TorchCommunicator(made[members(colors, self.rank)])

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


_KEPT: dict = {}  # (default group, group) → {colours: TorchCommunicator, "nodes": layout}
_MADE: dict = {}  # default group → {global ranks: the process group made for them}


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
