"""``auto``: pick the algorithm the fitted cost model predicts to be fastest.

Taught in the chapter "Choosing an algorithm".  For ``n`` bytes on ``p`` ranks, :func:`choose`
evaluates the α-β-γ time (:mod:`allreduce.cost`) of each candidate and takes the smallest.
The model is :data:`DEFAULT_MODEL`, committed with the library, unless this process asks for
another: :func:`use_model` (a model in hand) or :func:`load_model` (one that
``allreduce-bench --save-model`` or a lab saved to a file).  A saved file is never read because
it exists, so two users of one machine get the same choices.  :func:`explain` says what ``auto``
would run for a size, with which model and where that model came from.

The choice is made before the call is checked, and the chosen name is part of what the ranks
check (:mod:`allreduce.validation`): ranks that would choose differently, because their
sizes or the models they loaded differ, raise instead of running different algorithms.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

from ..arrays import nbytes
from ..comm import Communicator
from ..cost import Model, Network, load, model_path
from ..ops import Op
from ..topology import Layout
from .rabenseifner import fast as rabenseifner
from .recursive_doubling import recursive_doubling
from .ring import ring

#: The algorithms ``auto`` chooses among: the fewest steps (recursive doubling), and the
#: two that meet the bandwidth lower bound, with lg p steps (Rabenseifner) or 2(p−1) (ring).
CANDIDATES = {"recursive_doubling": recursive_doubling, "rabenseifner": rabenseifner,
              "ring": ring}

#: The model ``auto`` uses unless a program loads another: what three ``make bench`` runs
#: (1 KiB to 64 MiB, 4 MPI ranks, their rows pooled in ``chapters/data/bench_fit.json``)
#: fit, on the critical path of the whole call and with a per-call overhead, on the course's
#: 2-core reference machine, idle, on 2026-11-25: :func:`allreduce.bench.record.fit_model`
#: of the named algorithms' rows (``auto``'s repeat them), which a test repeats.  The record,
#: ``chapters/data/bench_reference.json``, is a later run whose ``auto`` rows ran with it.
#: α per step includes the Python cost of a step.  Fit your own machine's with
#: ``allreduce-bench --save-model`` and use it with :func:`load_model`.
DEFAULT_MODEL = Model(alpha=30.1e-6, beta=1 / 3.20e9, gamma=1 / 5.77e9, overhead=39.1e-6)
#: Where :data:`DEFAULT_MODEL` came from, as :func:`model_source` names it.
DEFAULT_SOURCE = ("the committed default (auto.DEFAULT_MODEL, fitted to three make bench runs "
                  "on the course's reference machine, 2026-11-25)")

_model: Model = DEFAULT_MODEL
_source: str = DEFAULT_SOURCE
_network: tuple[Model, Model] | None = None  # use_network()'s levels, if any
_chosen: dict[tuple, tuple[str, dict]] = {}  # resolve()'s answers under model()


def model() -> Model:
    """The model :func:`choose` uses: :data:`DEFAULT_MODEL` unless this process chose
    another (:func:`use_model`, :func:`load_model`)."""
    return _model


def model_source() -> str:
    """Where :func:`model` came from: the committed default, a file and its date, or a
    model given in this process."""
    return _source


def use_model(new: Model | None, source: str = "a model given in this process (use_model)"
              ) -> None:
    """Make :func:`choose` use ``new`` in this process (``None``: the committed default),
    ``source`` saying where it came from.  Every rank must use the same model, or their
    choices can differ and the call raises."""
    global _model, _source
    _model, _source = (DEFAULT_MODEL, DEFAULT_SOURCE) if new is None else (new, source)
    _chosen.clear()


def load_model(path: Path | str | None = None) -> Model:
    """Use the model saved at ``path`` (default :func:`allreduce.cost.model_path`, where
    ``allreduce-bench --save-model`` keeps it) from now on in this process, and return it.
    Raises ``FileNotFoundError`` if there is none: asking for a saved model that is not
    there is an error, not a silent fall-back to the default."""
    path = Path(path) if path is not None else model_path()
    saved = load(path)
    if saved is None:
        raise FileNotFoundError(f"no saved model at {path} (allreduce-bench --save-model "
                                "writes one)")
    when = datetime.datetime.fromtimestamp(path.stat().st_mtime).strftime("%Y-%m-%d %H:%M")
    use_model(saved, f"the file {path}, saved {when}")
    return saved


@dataclass(frozen=True)
class Explanation:
    """What ``auto`` runs for ``nbytes`` bytes on ``size`` ranks (:func:`explain`): the
    choice and its options, each candidate's predicted seconds, and the model behind them
    with where it came from."""

    nbytes: int
    size: int
    chosen: str
    options: dict
    predicted: dict[str, float]
    model: Model
    source: str

    def __str__(self) -> str:
        times = ", ".join(f"{name} {seconds * 1e6:.1f} us"
                          for name, seconds in self.predicted.items())
        return (f"auto on {self.size} ranks, {self.nbytes} B: {self.chosen}"
                f"{f' {self.options}' if self.options else ''} (predicted: {times})\n"
                f"model: {describe_model(self.model)}\nfrom {self.source}")


def describe_model(model: Model) -> str:
    """The model's parameters in words, saying which terms a fit left out (zero)."""
    parts = [f"alpha = {model.alpha * 1e6:.1f} us per step",
             f"1/beta = {1 / model.beta / 1e9:.2f} GB/s" if model.beta else "beta left out (0)",
             f"1/gamma = {1 / model.gamma / 1e9:.2f} GB/s" if model.gamma
             else "gamma left out (0: reductions cost nothing)",
             f"overhead = {model.overhead * 1e6:.1f} us per call" if model.overhead
             else "overhead left out (0: a call costs only its steps)"]
    return ", ".join(parts)


def explain(nbytes: int, size: int, ranks_per_node: int | None = None) -> Explanation:
    """What ``auto`` would run for ``nbytes`` bytes on ``size`` ranks (nodes of
    ``ranks_per_node``), why (each candidate's predicted time) and under which model, from
    where: the answer a user compares with another's."""
    chosen, options = resolve(nbytes, size, ranks_per_node)
    if ranks_per_node is not None and ranks_per_node < size:
        predicted = _times_on_nodes(nbytes, size, network(ranks_per_node))[0]
    else:
        predicted = {name: _model.time(name, size, nbytes) for name in CANDIDATES}
    return Explanation(nbytes, size, chosen, dict(options), predicted, _model, _source)


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
    times, options = _times_on_nodes(nbytes, size, network)
    best = min(times, key=times.get)
    return best, options.get(best, {})


def _times_on_nodes(nbytes: int, size: int, network: Network) -> tuple[dict, dict]:
    where = Layout.per_node(size, network.ranks_per_node)
    inner = fastest(-(-nbytes // where.smallest), where.nodes, network.inter)
    options = {"hierarchical": {"ranks_per_node": network.ranks_per_node, "inner": inner}}
    times = {name: network.time(name, size, nbytes, **options.get(name, {}))
             for name in (*CANDIDATES, "hierarchical")}
    return times, options


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
