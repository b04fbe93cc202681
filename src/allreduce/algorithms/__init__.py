"""The allreduce algorithms, one module each, all written against
:class:`allreduce.comm.Communicator`.

Every function here has the signature ``algorithm(buf, comm, op)`` and reduces the flat,
contiguous buffer ``buf`` in place.  :data:`REGISTRY` maps the public names, in the order the
book teaches them, to these functions.
"""

from .. import cost
from . import (naive, parameter_server, pipelined_ring, rabenseifner, recursive_doubling,
               reduce_broadcast, ring, tree)
from .auto import auto

REGISTRY = {
    "parameter_server": parameter_server.parameter_server,
    "sharded_parameter_server": parameter_server.sharded_parameter_server,
    "naive": naive.naive,
    "reduce_broadcast": reduce_broadcast.reduce_broadcast,
    "tree": tree.tree,
    "recursive_doubling": recursive_doubling.recursive_doubling,
    "ring": ring.ring,
    "pipelined_ring": pipelined_ring.pipelined_ring,
    "rabenseifner": rabenseifner.rabenseifner,
    "auto": auto,
}

#: Each algorithm's critical-path formula, stated in its module beside its code; the cost
#: model reads them from here (:data:`allreduce.cost.FORMULAS`).
FORMULAS = {
    "parameter_server": parameter_server.COST,
    "sharded_parameter_server": parameter_server.SHARDED_COST,
    "naive": naive.COST,
    "reduce_broadcast": reduce_broadcast.COST,
    "tree": tree.COST,
    "recursive_doubling": recursive_doubling.COST,
    "ring": ring.COST,
    "pipelined_ring": pipelined_ring.COST,
    "rabenseifner": rabenseifner.COST,
}
cost.FORMULAS.update(FORMULAS)

#: Algorithms that can read their input from a separate array (``source=``), which saves
#: the library copying the input into the result before they start.
READS_SOURCE = frozenset({"recursive_doubling", "ring", "pipelined_ring", "rabenseifner"})

#: Algorithms that take the ``servers`` option.
SHARDED = frozenset({"parameter_server", "sharded_parameter_server"})
