"""The allreduce algorithms, one module each, all written against
:class:`allreduce.comm.Communicator`.

Every function here has the signature ``algorithm(buf, comm, op)`` and reduces the flat,
contiguous buffer ``buf`` in place.  :data:`REGISTRY` maps the public names, in the order the
book teaches them, to these functions.
"""

from .auto import auto
from .naive import naive
from .parameter_server import parameter_server, sharded_parameter_server
from .pipelined_ring import pipelined_ring
from .rabenseifner import rabenseifner
from .recursive_doubling import recursive_doubling
from .reduce_broadcast import reduce_broadcast
from .ring import ring
from .tree import tree

REGISTRY = {
    "parameter_server": parameter_server,
    "sharded_parameter_server": sharded_parameter_server,
    "naive": naive,
    "reduce_broadcast": reduce_broadcast,
    "tree": tree,
    "recursive_doubling": recursive_doubling,
    "ring": ring,
    "pipelined_ring": pipelined_ring,
    "rabenseifner": rabenseifner,
    "auto": auto,
}

#: Algorithms that can read their input from a separate array (``source=``), which saves
#: the library copying the input into the result before they start.
READS_SOURCE = frozenset({"recursive_doubling", "ring", "pipelined_ring", "rabenseifner"})

#: Algorithms that take the ``servers`` option.
SHARDED = frozenset({"parameter_server", "sharded_parameter_server"})
