"""Transports: the implementations of :class:`allreduce.comm.Communicator`, and
:func:`as_communicator`, which picks the one that wraps what the user passed.  Each transport
is imported only when it is first needed (mpi4py and torch are optional)."""

from __future__ import annotations

import atexit
import sys
from typing import Any

from ..comm import Communicator

_TRANSPORTS: dict[type, type[Communicator]] = {}  # comm's type → the transport that wraps it
#: id(mpi4py communicator or torch.distributed group) → (it, its wrapper): a call's checks
#: key on the wrapper (``allreduce``'s plans), and wrapping costs queries of rank and size.
#: Held strongly, so that no other object takes the id; a freed mpi4py communicator
#: (COMM_NULL, false) is wrapped anew, and refused.
_WRAPPED: dict[int, tuple[Any, Communicator]] = {}
# let them go before the interpreter's teardown: a torch.distributed group kept until then
# aborted its process at exit now and then ("terminate called without an active exception")
atexit.register(_WRAPPED.clear)


def as_communicator(comm: Any) -> Communicator:
    """Wrap ``comm`` in the matching transport.

    ``comm`` may be an :class:`Communicator`, an mpi4py intracommunicator (``MPI.COMM_WORLD``
    or one derived from it), or a torch.distributed ``ProcessGroup`` (``dist.group.WORLD``
    or one from ``dist.new_group``).  Anything else is a ``TypeError``.
    """
    if isinstance(comm, Communicator):
        return comm
    wrapped = _WRAPPED.get(id(comm))
    if wrapped is not None and wrapped[0] is comm and comm:
        return wrapped[1]
    transport = _TRANSPORTS.get(type(comm))
    if transport is not None:
        return _keep(comm, transport(comm))
    module = type(comm).__module__
    if module.startswith("mpi4py") and "mpi4py.MPI" in sys.modules:
        from .mpi import MPICommunicator

        _TRANSPORTS[type(comm)] = MPICommunicator  # later calls skip the import machinery
        return _keep(comm, MPICommunicator(comm))
    if "torch.distributed" in sys.modules:
        import torch.distributed as dist

        if isinstance(comm, dist.ProcessGroup):
            from .torchdist import TorchCommunicator

            _TRANSPORTS[type(comm)] = TorchCommunicator
            return _keep(comm, TorchCommunicator(comm))
    raise TypeError(
        "comm must be an mpi4py intracommunicator (e.g. MPI.COMM_WORLD), a torch.distributed "
        f"ProcessGroup (e.g. dist.group.WORLD) or an allreduce.Communicator; got {type(comm).__name__}"
    )


def _keep(comm: Any, wrapper: Communicator) -> Communicator:
    """Remember the wrapper of ``comm`` (see :data:`_WRAPPED`)."""
    if len(_WRAPPED) >= 64:
        _WRAPPED.clear()
    _WRAPPED[id(comm)] = (comm, wrapper)
    return wrapper
