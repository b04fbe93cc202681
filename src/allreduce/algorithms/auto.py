"""``auto``: pick the algorithm the fitted cost model predicts to be fastest.

Taught in the chapter "Choosing an algorithm".  For ``n`` bytes on ``p`` ranks, :func:`choose`
evaluates the α-β-γ time (:mod:`allreduce.cost`) of each candidate and takes the smallest.
The model is the one this machine's benchmark saved (``allreduce-bench --save-model``, kept
at :func:`allreduce.cost.model_path`) or, until there is one, :data:`DEFAULT_MODEL`.

The choice is made before the call is checked, and the chosen name is part of what the ranks
check (:mod:`allreduce.validation`): ranks that would choose differently, because their
sizes or their saved models differ, raise instead of running different algorithms.
"""

from __future__ import annotations

from ..arrays import nbytes
from ..comm import Communicator
from ..cost import Model, Network, load
from ..ops import Op
from ..topology import Layout
from .rabenseifner import rabenseifner
from .recursive_doubling import recursive_doubling
from .ring import ring

#: The algorithms ``auto`` chooses among: the fewest steps (recursive doubling), and the
#: two that meet the bandwidth lower bound, with lg p steps (Rabenseifner) or 2(p−1) (ring).
CANDIDATES = {"recursive_doubling": recursive_doubling, "rabenseifner": rabenseifner,
              "ring": ring}

#: The model ``auto`` uses before a benchmark has saved one: what ``make bench`` (1 KiB to
#: 64 MiB, 4 MPI ranks) fitted, on the critical path and with a per-call overhead, on the
#: course's 2-core reference machine on 2026-11-23 (the run before the one recorded in
#: ``chapters/data/bench_reference.json``, whose ``auto`` rows ran with this model).
#: α per step includes the Python cost of a step.  Save your own machine's with
#: ``allreduce-bench --save-model``.
DEFAULT_MODEL = Model(alpha=77.6e-6, beta=1 / 1.93e9, gamma=1 / 4.73e9, overhead=48.3e-6)

_model: Model | None = None
_network: tuple[Model, Model] | None = None  # use_network()'s levels, if any
_chosen: dict[tuple, tuple[str, dict]] = {}  # resolve()'s answers under model()


def model() -> Model:
    """The model :func:`choose` uses: the saved one, read once per process, or the default."""
    global _model
    if _model is None:
        _model = load() or DEFAULT_MODEL
        _chosen.clear()
    return _model


def use_model(new: Model | None) -> None:
    """Make :func:`choose` use ``new`` in this process (``None``: read the saved one again).
    Every rank must use the same model, or their choices can differ and the call raises."""
    global _model
    _model = new
    _chosen.clear()


def use_network(intra: Model | None, inter: Model | None = None) -> None:
    """Make :func:`choose` use these two levels of links when a call gives its nodes
    (``ranks_per_node=``); ``None``: both levels are :func:`model` (one machine's links)."""
    global _network
    _network = None if intra is None else (intra, inter or intra)
    _chosen.clear()


def network(ranks_per_node: int) -> Network:
    """The :class:`~allreduce.cost.Network` :func:`choose` uses on nodes of that many ranks."""
    intra, inter = _network or (model(), model())
    return Network(intra, inter, ranks_per_node)


def fastest(nbytes: int, size: int, model: Model) -> str:
    """The candidate with the smallest predicted time under ``model`` for ``nbytes`` bytes on
    ``size`` ranks (ties go to the one listed first): ``auto``'s rule."""
    return min(CANDIDATES, key=lambda name: model.time(name, size, nbytes))


def fastest_on_nodes(nbytes: int, size: int, network: Network) -> tuple[str, dict]:
    """``auto``'s rule when the nodes are known (chapter "Beyond one flat ring"): the
    candidates and the hierarchical allreduce, whose inner algorithm is the fastest
    candidate across the nodes (on ``network.inter``'s links, for the owned shard), each
    timed on the two levels of ``network``.  Returns the name and its options."""
    where = Layout.per_node(size, network.ranks_per_node)
    inner = fastest(-(-nbytes // where.smallest), where.nodes, network.inter)
    options = {"hierarchical": {"ranks_per_node": network.ranks_per_node, "inner": inner}}
    times = {name: network.time(name, size, nbytes, **options.get(name, {}))
             for name in (*CANDIDATES, "hierarchical")}
    best = min(times, key=times.get)
    return best, options.get(best, {})


def resolve(nbytes: int, size: int, ranks_per_node: int | None = None) -> tuple[str, dict]:
    """What ``auto`` runs for ``nbytes`` bytes on ``size`` ranks, and with which options:
    :func:`fastest` under :func:`model`, or :func:`fastest_on_nodes` under :func:`network`
    when the call says how many ranks share a node; remembered per size."""
    key = (nbytes, size, ranks_per_node)
    chosen = _chosen.get(key)  # a training loop asks about the same few sizes every step
    if chosen is None:
        if len(_chosen) > 4096:
            _chosen.clear()
        if ranks_per_node is not None and ranks_per_node < size:
            chosen = fastest_on_nodes(nbytes, size, network(ranks_per_node))
        else:
            chosen = fastest(nbytes, size, model()), {}
        _chosen[key] = chosen
    return chosen


def choose(nbytes: int, size: int, using: Model | None = None) -> str:
    """The name of the algorithm ``auto`` runs for ``nbytes`` bytes on ``size`` ranks:
    :func:`fastest` under ``using``, or under :func:`model` (:func:`resolve`)."""
    if using is not None:
        return fastest(nbytes, size, using)
    return resolve(nbytes, size)[0]


def auto(buf, comm: Communicator, op: Op) -> None:
    """Allreduce in place with the algorithm :func:`choose` picks."""
    CANDIDATES[choose(nbytes(buf), comm.size)](buf, comm, op)
