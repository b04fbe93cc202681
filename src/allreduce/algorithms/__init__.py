"""The allreduce algorithms, one module each, all written against
:class:`allreduce.comm.Communicator`.

Every function here has the signature ``algorithm(buf, comm, op)`` and reduces the flat,
contiguous buffer ``buf`` in place.  :data:`REGISTRY` maps the public names, in the order the
book teaches them, to these functions.
"""

from .. import cost
from . import (
               bidirectional_ring,
               hierarchical,
               naive,
               parameter_server,
               pipelined_ring,
               rabenseifner,
               recursive_doubling,
               reduce_broadcast,
               ring,
               torus,
               tree,
)
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
    "rabenseifner": rabenseifner.fast,  # rabenseifner.rabenseifner, scheduled once per size
    "bidirectional_ring": bidirectional_ring.bidirectional_ring,
    "torus": torus.torus,
    "hierarchical": hierarchical.hierarchical,
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
    "bidirectional_ring": bidirectional_ring.COST,
    "torus": torus.COST,
    "hierarchical": hierarchical.COST,
}
cost.FORMULAS.update(FORMULAS)

#: What crosses the links inside a node and between nodes (chapter "Beyond one flat ring"),
#: for the algorithms that state it; :class:`allreduce.cost.Network` reads them.
cost.LEVELS.update({
    "recursive_doubling": recursive_doubling.LEVELS,
    "ring": ring.LEVELS,
    "rabenseifner": rabenseifner.LEVELS,
    "bidirectional_ring": bidirectional_ring.LEVELS,
    "torus": torus.LEVELS,
    "hierarchical": hierarchical.COST,
})

#: The algorithms whose two phases are public (``allreduce.reduce_scatter`` and
#: ``allreduce.allgather``): ``(reduce_scatter, allgather)``, each leaving rank ``r`` with
#: chunk ``r`` of ``chunk_bounds``, whichever the algorithm.
PHASES = {
    "ring": (ring.reduce_scatter, ring.allgather),
    "rabenseifner": (rabenseifner.reduce_scatter, rabenseifner.allgather),
    "torus": (torus.reduce_scatter, torus.allgather),
    "hierarchical": (hierarchical.reduce_scatter, hierarchical.allgather),
}

#: Algorithms that can read their input from a separate array (``source=``), which saves
#: the library copying the input into the result before they start.
READS_SOURCE = frozenset({"recursive_doubling", "ring", "pipelined_ring", "rabenseifner",
                          "torus", "hierarchical"})

#: Algorithms that take the ``servers`` option.
SHARDED = frozenset({"parameter_server", "sharded_parameter_server"})

#: Algorithms that take a node layout: ``hierarchical`` (``ranks_per_node=`` or ``nodes=``),
#: and ``auto`` (``ranks_per_node=`` only), which then chooses on two levels of links
#: (:func:`allreduce.algorithms.auto.choose`).
LAYOUT = frozenset({"hierarchical", "auto"})
