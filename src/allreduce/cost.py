"""The α-β-γ cost model: how long an allreduce of ``n`` bytes on ``p`` ranks should take.

Taught in the chapter "Why gradients must be aggregated" (and used by every algorithm
chapter).  A message of ``m`` bytes costs ``α + m·β`` on its sender's and its receiver's
ports (full duplex, single port: a rank sends one message and receives one at a time);
reducing ``m`` bytes costs ``m·γ``.  An algorithm's time is

    T = steps·α + bytes·β + reduced·γ,

where each count is taken on the **critical path**: the finishing time of a replay of the
algorithm's trace with (α, β, γ) = (1, 0, 0), (0, 1, 0) and (0, 0, 1)
(:meth:`allreduce.trace.Trace.critical_path`).  A root that receives lg p buffers and then
sends lg p is charged 2·lg p·n, not the lg p·n it sends.

Each algorithm states its counts in closed form beside its code, as a :class:`Formula`
(Thakur, Rabenseifner & Gropp 2005; Patarasuk & Yuan 2009); the algorithms' package
registers them in :data:`FORMULAS`; the chapters render them with :meth:`Formula.latex`; the
test suite checks each one against the replay of the real code's trace.

:func:`fit` finds α, β and γ from measured times by least squares on the *relative* error:
an ordinary fit is dominated by the largest messages and can give a negative α.
"""

from __future__ import annotations

import itertools
import json
import math
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from .topology import grid


@dataclass(frozen=True)
class Terms:
    """The counts in front of α, β and γ on the critical path: ``steps`` (messages in a
    row), ``bytes`` (bytes through the busiest ports in a row) and ``reduced`` (bytes
    reduced in a row)."""

    steps: float
    bytes: float
    reduced: float

    def __add__(self, other: Terms) -> Terms:
        return Terms(self.steps + other.steps, self.bytes + other.bytes,
                     self.reduced + other.reduced)


def _lg(p: float) -> float:
    return math.log2(p)


def _clg(p: int) -> int:
    return math.ceil(math.log2(p)) if p > 1 else 0


def largest_power_of_two(p: int) -> int:
    """2^⌊lg p⌋: the number of ranks a fold reduces ``p`` to."""
    return 1 << (p.bit_length() - 1)


@dataclass(frozen=True)
class Formula:
    """An algorithm's critical-path counts in closed form, as three expressions in Python
    syntax, so that the model evaluates them (:meth:`terms`) and the book prints them
    (:meth:`latex`) from the same text.

    The expressions may use ``p`` (ranks), ``n`` (bytes per rank), ``q`` = 2^⌊lg p⌋ and
    ``f`` = 1 when ``p`` ≠ ``q`` (for algorithms that fold onto a power of two), ``lg``
    (log₂), ``clg`` (⌈log₂⌉), ``ceiling``, and the names in ``constants`` (fixed numbers,
    such as a segment size) and ``options`` (a keyword option, the symbol it stands for, and
    its default as an expression: the servers ``S`` of a parameter server).  For the 2D
    ring, ``R`` × ``C`` is :func:`allreduce.topology.grid`'s grid; on nodes of ``k`` ranks
    (keyword ``ranks_per_node``, by default all ``p`` on one), ``N`` is the number of
    nodes and ``s`` the last node's ranks (chapter "Beyond one flat ring")."""

    steps: str
    bytes: str
    reduced: str
    constants: tuple[tuple[str, float], ...] = ()
    options: tuple[tuple[str, str, str], ...] = ()  # (keyword, symbol, default expression)

    def _names(self, p: int, n: float, given: dict) -> dict:
        q = largest_power_of_two(p)
        k = min(given.pop("ranks_per_node", None) or p, p)
        nodes = -(-p // k)
        rows, columns = grid(p)
        names = {"p": p, "n": n, "q": q, "f": int(p != q), "lg": _lg, "clg": _clg,
                 "ceiling": math.ceil, "k": k, "N": nodes, "s": p - (nodes - 1) * k,
                 "R": rows, "C": columns, **dict(self.constants)}
        for keyword, symbol, default in self.options:
            value = given.pop(keyword, None)
            names[symbol] = eval(default, {"__builtins__": {}}, names) if value is None else value
        if given:
            raise TypeError(f"unknown cost options {sorted(given)}")
        return names

    def terms(self, p: int, n: float, **options) -> Terms:
        """The counts for ``n`` bytes on ``p`` ranks (exact when ``p`` divides ``n``)."""
        names = self._names(p, n, dict(options))
        return Terms(*(float(eval(e, {"__builtins__": {}}, names))
                       for e in (self.steps, self.bytes, self.reduced)))

    def latex_terms(self, *, power_of_two: bool = False, **values: float) -> tuple[str, ...]:
        """The three counts as LaTeX (steps, bytes, reduced); with ``power_of_two``,
        simplified for p = 2^k (q = p, f = 0); ``values`` fix symbols (``S=1``)."""
        import sympy
        from sympy.parsing.sympy_parser import parse_expr

        class lg(sympy.Function):
            def _latex(self, printer):
                return r"\log_2 " + printer._print(self.args[0])

        class clg(sympy.Function):
            def _latex(self, printer):
                return r"\lceil\log_2 " + printer._print(self.args[0]) + r"\rceil"

        symbols = {s: sympy.Symbol(s) for s in ("p", "n", "q", "f", "k", "N", "s", "R", "C")}
        symbols |= {s: sympy.Symbol(s) for s, _ in self.constants}
        symbols |= {s: sympy.Symbol(s) for _, s, _ in self.options}
        local = {"lg": lg, "clg": clg, "ceiling": sympy.ceiling, **symbols}
        fixed = {symbols[s]: v for s, v in values.items()}
        if power_of_two:
            fixed |= {symbols["q"]: symbols["p"], symbols["f"]: 0}
        texts = []
        for text in (self.steps, self.bytes, self.reduced):
            if fixed:
                expression = parse_expr(text, local_dict=local).subs(fixed)
                expression = sympy.factor(expression) if expression.free_symbols else expression
            else:
                expression = parse_expr(text, local_dict=local, evaluate=False)
            latex = sympy.latex(expression)
            texts.append(rf"\left({latex}\right)" if isinstance(expression, sympy.Add) else latex)
        return tuple(texts)

    def latex(self, name: str = "", **options) -> str:
        r"""The formula as LaTeX, ``T_\text{name} = …α + …β + …γ`` (``options`` as in
        :meth:`latex_terms`)."""
        parts = [rf"{text}\,{unit}" for text, unit in zip(self.latex_terms(**options),
                                                             (r"\alpha", r"\beta", r"\gamma"))
                 if text != "0"]
        left = f"T_\\text{{{name}}} = " if name else ""
        return left + (" + ".join(parts) or "0")


#: Each algorithm's :class:`Formula`, registered by :mod:`allreduce.algorithms` from the
#: modules that state them (the model reads the formulas; it does not import the code).
FORMULAS: dict[str, Formula] = {}


def terms(algorithm: str, p: int, n: float, **options) -> Terms:
    """Critical-path counts of ``algorithm`` for ``n`` bytes on ``p`` ranks, from its
    :class:`Formula` (``n`` divisible by ``p`` and by the servers for exact agreement
    with a trace; otherwise the chunk sizes round)."""
    if algorithm not in FORMULAS:
        raise ValueError(f"no cost formula for algorithm {algorithm!r}")
    return FORMULAS[algorithm].terms(p, n, **options)


@dataclass(frozen=True)
class Model:
    """α in seconds per message, β in seconds per byte through a port, γ in seconds per byte
    reduced, and ``overhead`` in seconds per call: the work a call does whatever the
    algorithm (Python dispatch, argument checks), which a measured model needs at small
    sizes and which never changes which algorithm is fastest."""

    alpha: float
    beta: float
    gamma: float = 0.0
    overhead: float = 0.0

    def __post_init__(self):
        # a string from a hand-edited model file would fail inside auto's choice, on the
        # ranks that loaded it only, before the check that makes every rank raise
        for name in ("alpha", "beta", "gamma", "overhead"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float, np.floating,
                                                                 np.integer)):
                raise TypeError(f"a Model's {name} must be a number of seconds, got {value!r}")

    def time(self, algorithm: str, p: int, nbytes: float, **options) -> float:
        """Predicted seconds for one allreduce of ``nbytes`` bytes per rank."""
        return self.predict(terms(algorithm, p, nbytes, **options))

    def predict(self, t: Terms) -> float:
        """Predicted seconds of one call whose critical path has the counts ``t``."""
        return (t.steps * self.alpha + t.bytes * self.beta + t.reduced * self.gamma
                + self.overhead)

    def message(self, nbytes: float) -> float:
        """Predicted seconds for one message of ``nbytes`` (α + n·β)."""
        return self.alpha + nbytes * self.beta


#: The two networks the chapter "Choosing an algorithm" simulates (and its lab checks
#: against): a 100 Gb/s cluster network, and an NVLink-class link with reductions on a GPU.
NETWORKS: dict[str, Model] = {
    "100 Gb/s, α = 2 µs": Model(alpha=2e-6, beta=1 / 12.5e9, gamma=1 / 100e9),
    "NVLink-class, α = 1 µs": Model(alpha=1e-6, beta=1 / 150e9, gamma=1 / 1000e9),
}


# -- two levels of links (chapter "Beyond one flat ring") -------------------------------------

@dataclass(frozen=True)
class Levels:
    """An algorithm's critical-path counts on a :class:`Network`: the part charged at the
    links inside a node (``intra``) and the part charged at the links between nodes
    (``inter``), for ``p`` ranks placed node-major, ``k`` to a node.  Where the condition
    ``exact`` (an expression in :class:`Formula`'s names) fails, :meth:`split` charges the
    whole single-level formula at the inter level instead: an upper bound, since the
    network's inter-node links are the slower ones.  The reduction counts (``reduced``)
    are the same at either level.  ``crossing`` (an expression in the same names) is how
    many of a node's ranks send across nodes in the same step: what one network card shared
    by the node carries at once (:class:`Network`'s ``shared_card``); ``k``, all of them,
    unless the algorithm says fewer."""

    intra: Formula
    inter: Formula
    exact: str = "True"
    crossing: str = "k"

    @classmethod
    def flat(cls, formula: Formula, exact: str = "N == 1", crossing: str = "k") -> Levels:
        """Everything at the inter level once there are two nodes: exact for a ring, where
        one slow link in the ring slows every step (the rank after it receives over it in
        every step), and an upper bound for others."""
        def where(condition: str) -> Formula:
            return Formula(*(f"({condition})*({e})" for e in (formula.steps, formula.bytes,
                                                           formula.reduced)),
                           formula.constants, formula.options)

        return cls(where("N == 1"), where("N > 1"), exact, crossing)

    def is_exact(self, p: int, k: int) -> bool:
        names = self.intra._names(p, 0.0, {"ranks_per_node": k})
        return bool(eval(self.exact, {"__builtins__": {}}, names))

    def split(self, p: int, n: float, k: int, whole: Formula | None = None,
              **options) -> tuple[Terms, Terms]:
        """``(intra, inter)`` for ``n`` bytes on ``p`` ranks, ``k`` to a node (``whole``:
        the single-level formula the upper bound charges at the inter level)."""
        if self.is_exact(p, k) or whole is None:
            return (self.intra.terms(p, n, ranks_per_node=k, **options),
                    self.inter.terms(p, n, ranks_per_node=k, **options))
        return Terms(0, 0, 0), whole.terms(p, n, **options)


#: Each algorithm's :class:`Levels` where it has its own (registered by
#: :mod:`allreduce.algorithms`); the others are charged :meth:`Levels.flat`.
LEVELS: dict[str, Levels] = {}


def level_terms(algorithm: str, p: int, n: float, k: int, **options) -> tuple[Terms, Terms]:
    """``(intra, inter)`` counts of ``algorithm`` on ``p`` ranks, ``k`` to a node."""
    if algorithm not in FORMULAS:
        raise ValueError(f"no cost formula for algorithm {algorithm!r}")
    whole = FORMULAS[algorithm]
    levels = LEVELS.get(algorithm) or Levels.flat(whole)
    return levels.split(p, n, k, whole, **options)


def card_sharers(algorithm: str, p: int, k: int) -> int:
    """How many of a node's ``k`` ranks send across nodes in the same step of ``algorithm``
    on ``p`` ranks (its levels' ``crossing``, at most ``k``): the ranks that share the node's
    network card when it has one card for all of them."""
    if algorithm not in FORMULAS:
        raise ValueError(f"no cost formula for algorithm {algorithm!r}")
    levels = LEVELS.get(algorithm) or Levels.flat(FORMULAS[algorithm])
    names = Formula("0", "0", "0")._names(p, 0.0, {"ranks_per_node": k})
    sharers = int(eval(getattr(levels, "crossing", "k"), {"__builtins__": {}}, names))
    return max(1, min(sharers, names["k"]))


def level_exact(algorithm: str, p: int, k: int) -> bool:
    """Whether :func:`level_terms` is the critical path itself, not an upper bound."""
    levels = LEVELS.get(algorithm) or Levels.flat(FORMULAS[algorithm])
    return levels.is_exact(p, k)


@dataclass(frozen=True)
class Network:
    """A network of two levels (chapter "Beyond one flat ring"): ``ranks_per_node`` ranks on
    each node joined by links of ``intra``'s α and β (NVLink, shared memory), the nodes
    joined by links of ``inter``'s (the cluster network).  The ranks reduce at ``intra``'s
    γ, and a call costs ``intra``'s overhead.  A step in which a rank uses both kinds of
    link is charged at the slower one, so ``inter`` must be no faster than ``intra``.

    By default every rank has a network card of its own (one card per GPU, as on DGX-class
    servers), so ranks that cross at once do not share a port.  With ``shared_card`` the
    node's ranks share one card: a step in which ``m`` of them send across
    (:func:`card_sharers`) takes ``m`` times as long at ``inter``'s β, so the card carries
    their bytes one after the other (the hierarchy's ``k`` shards: about
    2(N−1)/N·n through the card, where the flat ring's one crossing rank per node sends as
    before)."""

    intra: Model
    inter: Model
    ranks_per_node: int
    shared_card: bool = False

    def __post_init__(self):
        if self.inter.alpha < self.intra.alpha or self.inter.beta < self.intra.beta:
            raise ValueError("the links between nodes must be no faster than those inside one")
        if self.ranks_per_node < 1:
            raise ValueError(f"ranks_per_node must be at least 1, got {self.ranks_per_node}")

    def levels(self, algorithm: str, p: int, nbytes: float, **options) -> tuple[Terms, Terms]:
        """``(intra, inter)`` counts of one call (:func:`level_terms`)."""
        return level_terms(algorithm, p, nbytes, self.ranks_per_node, **options)

    def time(self, algorithm: str, p: int, nbytes: float, **options) -> float:
        """Predicted seconds for one allreduce of ``nbytes`` bytes per rank on ``p`` ranks."""
        intra, inter = self.levels(algorithm, p, nbytes, **options)
        sharers = card_sharers(algorithm, p, self.ranks_per_node) if self.shared_card else 1
        return (intra.steps * self.intra.alpha + intra.bytes * self.intra.beta
                + inter.steps * self.inter.alpha + inter.bytes * sharers * self.inter.beta
                + (intra.reduced + inter.reduced) * self.intra.gamma + self.intra.overhead)

    def link(self, nodes: Sequence[int]):
        """``link(source, dest) -> (α, β)`` for :meth:`allreduce.trace.Trace.critical_path`,
        with ``nodes[rank]`` each rank's node: a replay of a trace on this network."""
        def cost_of(source: int, dest: int) -> tuple[float, float]:
            model = self.intra if nodes[source] == nodes[dest] else self.inter
            return model.alpha, model.beta

        return cost_of


def _gbps(bits_per_second: float) -> float:
    return 1 / (bits_per_second / 8)


#: The nodes the chapter "Beyond one flat ring" simulates: 8 GPUs on NVLink-class links
#: (:data:`NETWORKS`' second), the nodes on 100 or 400 Gb/s (α = 2 µs).
NODE_NETWORKS: dict[str, Network] = {
    f"{rate} Gb/s between nodes": Network(
        NETWORKS["NVLink-class, α = 1 µs"],
        Model(alpha=2e-6, beta=_gbps(rate * 1e9), gamma=NETWORKS["NVLink-class, α = 1 µs"].gamma),
        ranks_per_node=8)
    for rate in (100, 400)}


def busbw(nbytes: float, seconds: float, p: int) -> float:
    """nccl-tests' bus bandwidth of an allreduce, bytes/s: algbw·2(p−1)/p, where algbw is
    ``nbytes / seconds``.  It makes the ring's bandwidth-optimal cost read as link speed.
    On one rank, where nccl-tests prints 0, this course's convention is algbw."""
    return nbytes / seconds * (2 * (p - 1) / p if p > 1 else 1.0)


def fit(counts: Sequence[Terms], seconds: Sequence[float], *, gamma: bool = True,
        overhead: bool = False) -> Model:
    """α, β (and γ, and the per-call ``overhead`` when asked for) ≥ 0 minimising the squared
    *relative* error of ``counts`` against ``seconds``, each ``seconds`` being one call.
    Non-negativity is enforced by trying every subset of the parameters (there are at most
    four) and keeping the best feasible fit."""
    a = np.array([[c.steps, c.bytes, c.reduced, 1.0] for c in counts], dtype=float)
    t = np.asarray(seconds, dtype=float)
    if len(a) != len(t) or len(t) == 0 or (t <= 0).any():
        raise ValueError("fit needs one positive time per measurement")
    a = a / t[:, None]  # relative error: (a·x)/t − 1
    columns = [0, 1] + [2] * gamma + [3] * overhead
    best, best_error = np.zeros(4), math.inf
    for k in range(1, len(columns) + 1):
        for subset in itertools.combinations(columns, k):
            x, *_ = np.linalg.lstsq(a[:, subset], np.ones(len(t)), rcond=None)
            if (x < 0).any():
                continue
            full = np.zeros(4)
            full[list(subset)] = x
            error = float(np.sum((a @ full - 1) ** 2))
            if error < best_error:
                best, best_error = full, error
    return Model(*map(float, best))


def crossover(model: Model | Network, first: str, second: str, p: int, *,
              largest: float = 2.0**50, **options) -> float | None:
    """The message size in bytes at which ``second`` becomes faster than ``first`` on
    ``p`` ranks under ``model`` (the chapter "Tree allreduce"), or ``None`` if ``first``
    is not faster for small messages or never loses below ``largest`` bytes.  Found by
    bisection; each algorithm's time is linear in ``n``, so there is at most one."""
    return crossing(lambda n: model.time(first, p, n, **options),
                    lambda n: model.time(second, p, n, **options), largest=largest)


def wins_somewhere(model: Model | Network, algorithm: str, p: int, rivals, *,
                   largest: float = 2.0**50) -> bool:
    """Whether ``algorithm`` is faster than every one of ``rivals`` on ``p`` ranks under
    ``model`` at some message size up to ``largest`` bytes (the chapters' "wins when"
    columns).  Exact: each time is linear in ``n``, so each rival leaves an interval of
    sizes where ``algorithm`` is faster, and it wins where all the intervals meet (a grid
    of sizes can miss a narrow one: on 7 ranks Rabenseifner wins only between about 76 and
    79 kB on the chapters' 100 Gb/s network)."""
    def line(name: str) -> tuple[float, float]:
        at_zero = model.time(name, p, 0.0)
        return at_zero, (model.time(name, p, largest) - at_zero) / largest

    lo, hi = 0.0, largest
    start, slope = line(algorithm)
    for rival in rivals:
        rival_start, rival_slope = line(rival)
        ahead, gaining = rival_start - start, rival_slope - slope  # faster where > 0
        if gaining == 0:
            if ahead <= 0:
                return False
        elif gaining > 0:
            lo = max(lo, -ahead / gaining)
        else:
            hi = min(hi, -ahead / gaining)
    return lo < hi


def crossing(first, second, *, largest: float = 2.0**50) -> float | None:
    """Where ``second(n)`` becomes smaller than ``first(n)`` (two times, linear in ``n``),
    as :func:`crossover` finds it; ``None`` as there."""
    def gap(n: float) -> float:
        return first(n) - second(n)

    lo, hi = 1.0, largest
    if gap(lo) >= 0 or gap(hi) <= 0:
        return None
    while hi - lo > 1e-9 * hi:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if gap(mid) < 0 else (lo, mid)
    return (lo + hi) / 2


def measured_crossover(sizes: Sequence[float], first: Sequence[float],
                       second: Sequence[float]) -> float | None:
    """Where measured times cross: the geometric mean of the last size at which ``first``
    was faster and the next one, once ``second`` stays faster; ``None`` if it never does
    or ``first`` is never faster."""
    faster = [a < b for a, b in zip(first, second)]
    if not faster[0] or all(faster):
        return None
    last = max(i for i, f in enumerate(faster) if f)
    if last == len(sizes) - 1:
        return None
    return math.sqrt(sizes[last] * sizes[last + 1])


def model_path() -> Path:
    """Where :func:`save` keeps this machine's fitted model: ``$ALLREDUCE_MODEL`` if set,
    else ``~/.cache/allreduce/model.json``."""
    default = Path.home() / ".cache" / "allreduce" / "model.json"
    return Path(os.environ.get("ALLREDUCE_MODEL", default))


def save(model: Model, path: Path | None = None) -> Path:
    """Keep a fitted model for later chapters' predictions (the lab "Why gradients must be
    aggregated" fits it).  Returns the path written."""
    path = path or model_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(asdict(model)))
    return path


def load(path: Path | None = None) -> Model | None:
    """The model :func:`save` kept, or ``None`` if there is none yet."""
    path = path or model_path()
    if not path.exists():
        return None
    try:
        return Model(**json.loads(path.read_text()))
    except (TypeError, ValueError) as error:  # not JSON, another object, a field not a number
        raise ValueError(f"{path} is not a model saved by allreduce-bench --save-model "
                         f"({error})") from None
