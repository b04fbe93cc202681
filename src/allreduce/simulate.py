"""Flat against two-level allreduce on many nodes, simulated on a :class:`~allreduce.cost.
Network` (chapter "Beyond one flat ring"): the flat ring and Rabenseifner over all ranks,
the 2D ring, and the hierarchical allreduce with a ring or Rabenseifner across the nodes,
each charged the links its messages take (``Network.time``, checked against level-labelled
traces by the tests).  The chapter's table, figure and crossovers come from here."""

from __future__ import annotations

from .cost import Network, crossing

#: The contenders: a name for the page, the algorithm and its options (the layout is the
#: network's ``ranks_per_node``, added for the hierarchical ones).
CONTENDERS: dict[str, tuple[str, dict]] = {
    "flat ring": ("ring", {}),
    "flat Rabenseifner": ("rabenseifner", {}),
    "2D ring": ("torus", {}),
    "hierarchical, ring across": ("hierarchical", {"inner": "ring"}),
    "hierarchical, Rabenseifner across": ("hierarchical", {"inner": "rabenseifner"}),
}


def time(net: Network, contender: str, nodes: int, nbytes: float) -> float:
    """Predicted seconds of one allreduce of ``nbytes`` per rank on ``nodes`` nodes."""
    algorithm, options = CONTENDERS[contender]
    if algorithm == "hierarchical":
        options = {**options, "ranks_per_node": net.ranks_per_node}
    return net.time(algorithm, nodes * net.ranks_per_node, nbytes, **options)


def fastest(net: Network, nodes: int, nbytes: float) -> str:
    """The contender with the smallest predicted time."""
    return min(CONTENDERS, key=lambda name: time(net, name, nodes, nbytes))


def crossover(net: Network, nodes: int, first: str, second: str) -> float | None:
    """The size in bytes per rank from which ``second`` beats ``first`` (``None`` if
    ``first`` is not the faster for small sizes, or never loses)."""
    return crossing(lambda n: time(net, first, nodes, n), lambda n: time(net, second, nodes, n))
