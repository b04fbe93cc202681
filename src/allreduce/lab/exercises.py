"""The labs' check cells in the kernel (:class:`~allreduce.lab.local.LocalCheck`): a fit, a
rule, a formula, DDP's buckets; with the sparse lab's (:mod:`allreduce.lab.sparse_exercises`)
they make :data:`LOCAL_CHECKS`, which the grader reads."""

from __future__ import annotations

import numpy as np

from .local import LocalCheck
from .sparse_exercises import check_error_feedback, check_merge

# -- the alpha-beta fit ----------------------------------------------------------------------

def _fit_cases():
    sizes = [2**k for k in range(25)]
    ripple = [1 + 0.05 * ((-1) ** k) for k in range(len(sizes))]
    return [[sizes, [(4e-6 + n * 1e-10) * r for n, r in zip(sizes, ripple)]]]


def _fit_secret(rng):
    """Ping-pong times of three more links: α from 0.5 to 100 µs, 1/β from 1 to 400 GB/s,
    each time off by up to 5% either way."""
    cases = []
    for _ in range(3):
        alpha, beta = 10 ** rng.uniform(-6.3, -4), 10 ** rng.uniform(-11.6, -9)
        sizes = sorted(int(s) for s in set(2 ** rng.integers(0, 28, 20)))
        cases.append([sizes, [(alpha + n * beta) * rng.uniform(0.95, 1.05) for n in sizes]])
    return cases


def _fit_verdict(cases, results) -> str:
    from .. import cost

    for (sizes, seconds), got in zip(cases, results, strict=True):
        expected = cost.fit([cost.Terms(1, n, 0) for n in sizes], seconds, gamma=False)
        if not isinstance(got, list) or len(got) != 2 or not all(
                isinstance(v, (int, float)) for v in got):
            raise AssertionError(f"the fit should return (alpha, beta), got {got!r}")
        for name, value, want in (("alpha", got[0], expected.alpha),
                                  ("beta", got[1], expected.beta)):
            if not np.isclose(value, want, rtol=1e-6, atol=0):
                raise AssertionError(
                    f"{name} = {value:.6g}, expected {want:.6g} for the times of sizes "
                    f"{sizes[0]} to {sizes[-1]} B (the minimum of the squared relative error; "
                    "an ordinary least-squares fit gives a different alpha)")
    got = results[0]
    return (f"fit: alpha = {got[0] * 1e6:.2f} us, 1/beta = {1 / got[1] / 1e9:.2f} GB/s, "
            "as allreduce.cost.fit finds")


#: Check cell for the α-β fitting exercise (chapter "Why gradients must be aggregated"):
#: ``function(sizes, seconds)`` must return ``(alpha, beta)`` minimising the squared relative
#: error, as :func:`allreduce.cost.fit` does, on synthetic ping-pong times with known α and β
#: and a fixed 5% ripple.  Runs here, not on the engines.
check_fit = LocalCheck(_fit_cases, lambda f, case, given: f(*case), _fit_verdict,
                       ("allreduce.cost.fit",), secret=_fit_secret)


def _check_models():
    """The machines the lab "Choosing an algorithm" checks its exercises on: this course's
    reference model, and the chapter's two simulated networks."""
    from .. import cost
    from ..algorithms.auto import DEFAULT_MODEL

    return {"the reference machine": DEFAULT_MODEL, **cost.NETWORKS}


def _models_given() -> dict:
    """The machines' parameters and the formulas of ``auto``'s candidates, as plain data:
    what the calls below build the student's model from (a graded run has the cost model
    but no algorithm module to register the formulas)."""
    from dataclasses import asdict

    from .. import cost
    from ..algorithms.auto import CANDIDATES

    return {"models": {name: asdict(model) for name, model in _check_models().items()},
            "formulas": {name: asdict(cost.FORMULAS[name]) for name in CANDIDATES}}


def _model_of(machine, named: dict):
    """The :class:`allreduce.cost.Model` of a case's machine: a name in ``named`` (of models,
    or of their fields), or a drawn machine's fields."""
    from .. import cost

    found = named[machine] if isinstance(machine, str) else machine
    return found if isinstance(found, cost.Model) else cost.Model(**found)


def _model(given: dict, machine):
    """:func:`_model_of` where the student's function runs, with the candidates' formulas
    registered where nothing has registered them."""
    from .. import cost

    for name, fields in given["formulas"].items():
        if name not in cost.FORMULAS:
            cost.FORMULAS[name] = cost.Formula(
                fields["steps"], fields["bytes"], fields["reduced"],
                tuple(map(tuple, fields["constants"])), tuple(map(tuple, fields["options"])))
    return _model_of(machine, given["models"])


def _machine_named(machine) -> str:
    """A case's machine as a message names it."""
    if not isinstance(machine, dict):
        return machine
    return (f"alpha = {machine['alpha'] * 1e6:.3g} us, 1/beta = {1e-9 / machine['beta']:.3g} "
            f"GB/s, 1/gamma = {1e-9 / machine['gamma']:.3g} GB/s")


def _drawn_machine(rng) -> dict:
    """A machine no one knows before the run: α from 0.1 to 100 µs, 1/β from 1 to 400 GB/s,
    1/γ from 1 to 1,000 GB/s."""
    return {"alpha": float(10 ** rng.uniform(-7, -4)),
            "beta": float(10 ** rng.uniform(-11.6, -9)),
            "gamma": float(10 ** rng.uniform(-12, -9)), "overhead": 0.0}


# -- choosing an algorithm -------------------------------------------------------------------

def _choice_cases():
    return [[machine, p, 8 * 4**k] for machine in _check_models()
            for p in (2, 3, 4, 5, 8, 12, 64, 100, 1024, 4096) for k in range(14)]


def _choice_secret(rng):
    return [[_drawn_machine(rng), int(rng.integers(2, 5000)), int(10 ** rng.uniform(0, 9.5))]
            for _ in range(60)]


def _choice_verdict(cases, results) -> str:
    from ..algorithms.auto import CANDIDATES

    for (machine, p, nbytes), got in zip(cases, results, strict=True):
        model = _model_of(machine, _check_models())
        times = {name: model.time(name, p, nbytes) for name in CANDIDATES}
        if not isinstance(got, str) or got not in times:
            raise AssertionError(f"p = {p}, n = {nbytes} B: got {got!r}, expected one "
                                 f"of {', '.join(CANDIDATES)}")
        if times[got] > min(times.values()):
            best = min(times, key=times.get)
            raise AssertionError(
                f"{_machine_named(machine)}, p = {p}, n = {nbytes} B: {got} is predicted to "
                f"take {times[got] * 1e6:.3g} us, but {best} takes {times[best] * 1e6:.3g} us")
    return f"choose_algorithm: the fastest candidate in all {len(cases)} cases"


#: Check cell for the exercise ``choose_algorithm(model, p, nbytes)`` (chapter "Choosing an
#: algorithm"): it must name a candidate of ``auto`` with the smallest predicted time, on
#: three machines, 2 to 4,096 ranks and 8 B to 512 MiB.  Runs here.
check_choice = LocalCheck(
    _choice_cases, lambda f, case, given: f(_model(given, case[0]), case[1], case[2]),
    _choice_verdict, ("allreduce.algorithms.auto",), _models_given, _choice_secret)


def _crossover_cases():
    return [[machine, p] for machine in _check_models() for p in (2, 4, 8, 64, 1024, 4096)]


def _crossover_secret(rng):
    return [[_drawn_machine(rng), int(2 ** rng.integers(1, 14))] for _ in range(12)]


def _crossover_verdict(cases, results) -> str:
    from .. import cost

    for (machine, p), got in zip(cases, results, strict=True):
        want = cost.crossover(_model_of(machine, _check_models()), "recursive_doubling",
                              "rabenseifner", p)
        if want is None or got is None:
            if want is not got:
                raise AssertionError(f"{_machine_named(machine)}, p = {p}: got {got!r}, "
                                     f"expected {want!r}")
            continue
        if not isinstance(got, (int, float)) or not np.isclose(got, want, rtol=1e-6):
            shown = f"{got:.6g} B" if isinstance(got, (int, float)) else repr(got)
            raise AssertionError(f"{_machine_named(machine)}, p = {p}: got {shown}, bisection "
                                 f"of the model gives {want:.6g} B")
    machines = len({str(machine) for machine, _ in cases})
    return (f"doubling_crossover: agrees with the model's bisection on {machines} machines, "
            f"p = {min(p for _, p in cases):,} to {max(p for _, p in cases):,}")


#: Check cell for the exercise ``doubling_crossover(model, p)``: the closed-form size in
#: bytes at which Rabenseifner overtakes recursive doubling on a power-of-two ``p``, against
#: :func:`allreduce.cost.crossover`'s bisection.  Runs here.
check_crossover = LocalCheck(
    _crossover_cases, lambda f, case, given: f(_model(given, case[0]), case[1]),
    _crossover_verdict, ("allreduce.cost.crossover", "allreduce.cost.crossing",
                         "allreduce.cost.measured_crossover"), _models_given,
    _crossover_secret)


# -- NCCL ------------------------------------------------------------------------------------

def _busbw_cases():
    return [[nbytes, seconds, p] for p in (1, 2, 3, 4, 8, 1024)
            for nbytes, seconds in ((1024, 1e-5), (1 << 30, 0.01), (12345, 3.5e-3))]


def _busbw_secret(rng):
    return [[int(10 ** rng.uniform(0, 10.5)), float(10 ** rng.uniform(-6, 1)),
             int(rng.integers(1, 5000))] for _ in range(20)]


def _busbw_verdict(cases, results) -> str:
    from .. import cost

    for (nbytes, seconds, p), got in zip(cases, results, strict=True):
        want = cost.busbw(nbytes, seconds, p)
        if not isinstance(got, (int, float)) or not np.isclose(got, want, rtol=1e-9):
            shown = f"{got:.6g} B/s" if isinstance(got, (int, float)) else repr(got)
            raise AssertionError(f"p = {p}, n = {nbytes} B in {seconds} s: got {shown}, "
                                 f"expected {want:.6g} B/s")
    return (f"busbw: agrees with nccl-tests' definition for p = {min(c[2] for c in cases):,} "
            f"to {max(c[2] for c in cases):,}")


#: Check cell for the exercise ``busbw(nbytes, seconds, p)`` (chapter "Allreduce on GPUs:
#: NCCL"), against :func:`allreduce.cost.busbw`.  Runs here.
check_busbw = LocalCheck(_busbw_cases, lambda f, case, given: f(*case), _busbw_verdict,
                         ("allreduce.cost.busbw",), secret=_busbw_secret)


def _bucket_cases():
    cases = [[[4, 4, 4], 8], [[10, 2, 3], 4], [[], 8], [[1] * 7, 3]]
    return cases + _bucket_secret(np.random.default_rng(0))


def _bucket_secret(rng):
    return [[[int(s) for s in rng.integers(1, 100, rng.integers(1, 30))],
             int(rng.integers(50, 300))] for _ in range(50)]


def _bucket_verdict(cases, results) -> str:
    from ..ddp_buckets import ddp_buckets

    for (sizes, cap), got in zip(cases, results, strict=True):
        want = ddp_buckets(sizes, cap)
        if got != want:
            raise AssertionError(f"sizes {sizes}, cap {cap}: got {got}, expected {want}")
    return f"ddp_buckets: the buckets DDP would make, in {len(cases)} cases"


#: Check cell for the exercise ``ddp_buckets(sizes, cap)``: the buckets DDP reduces after its
#: rebuild (:func:`allreduce.ddp_buckets.ddp_buckets`, checked against a real DDP by the
#: test suite).  Runs here.
check_ddp_buckets = LocalCheck(_bucket_cases, lambda f, case, given: f(*case), _bucket_verdict,
                               ("allreduce.ddp_buckets",), secret=_bucket_secret)


def _torus_cases():
    sizes = [1, 2, 3, 4, 6, 7, 8, 9, 12, 16, 36, 48, 60, 64, 97, 100, 128, 1000, 1024, 4096,
             4093, 8192]
    return [[p, 2520 * 4096] for p in sizes]


def _torus_secret(rng):
    return [[int(rng.integers(1, 20000)), 4096 * int(rng.integers(1, 10000))] for _ in range(20)]


def _torus_verdict(cases, results) -> str:
    from .. import cost
    from ..topology import grid

    for (p, n), got in zip(cases, results, strict=True):
        want = cost.terms("torus", p, n)
        if (not isinstance(got, list) or len(got) != 2
                or not all(isinstance(v, (int, float)) for v in got)):
            raise AssertionError(f"torus_cost({p}, {n}) should return (steps, bytes), got {got!r}")
        if not (np.isclose(got[0], want.steps) and np.isclose(got[1], want.bytes, rtol=1e-9)):
            rows, columns = grid(p)
            raise AssertionError(
                f"p = {p} (a {rows} x {columns} grid), n = {n} B: got {got[0]:g} steps and "
                f"{got[1]:.6g} bytes, expected {want.steps:g} steps and {want.bytes:.6g} bytes")
    return f"torus_cost: the 2D ring's steps and bytes for all {len(cases)} rank counts"


#: Check cell for the exercise ``torus_cost(p, n)`` (chapter "Beyond one flat ring"): the
#: 2D ring's steps and bytes on the critical path, its grid as square as p allows (rows
#: no more than columns), against the formula the library evaluates
#: (:data:`allreduce.algorithms.torus.COST`, checked against traces).  Runs here.
check_torus_cost = LocalCheck(_torus_cases, lambda f, case, given: f(*case), _torus_verdict,
                              ("allreduce.cost", "allreduce.topology"), secret=_torus_secret)


#: The checks above by the name a check cell calls them with (the grader reads it there).
LOCAL_CHECKS = {"check_fit": check_fit, "check_choice": check_choice,
                "check_crossover": check_crossover, "check_busbw": check_busbw,
                "check_ddp_buckets": check_ddp_buckets, "check_merge": check_merge,
                "check_error_feedback": check_error_feedback,
                "check_torus_cost": check_torus_cost}
