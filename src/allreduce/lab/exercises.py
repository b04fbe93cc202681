"""The labs' other check cells: exercises checked here in the kernel (a fit, a rule, a
formula, DDP's buckets) or by training on the engines (the capstone's overlap)."""

from __future__ import annotations

import numpy as np


def check_fit(function) -> None:
    """Check cell for the α-β fitting exercise (chapter "Why gradients must be
    aggregated"): ``function(sizes, seconds)`` must return ``(alpha, beta)`` minimising the
    squared relative error, as :func:`allreduce.cost.fit` does.  Runs here, not on the
    engines, on synthetic ping-pong times with known α and β and a fixed 5% ripple."""
    from .. import cost

    sizes = [2**k for k in range(25)]
    ripple = [1 + 0.05 * ((-1) ** k) for k in range(len(sizes))]
    seconds = [(4e-6 + n * 1e-10) * r for n, r in zip(sizes, ripple)]
    expected = cost.fit([cost.Terms(1, n, 0) for n in sizes], seconds, gamma=False)
    got = function(sizes, seconds)
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        raise AssertionError(f"the fit should return (alpha, beta), got {got!r}")
    for name, value, want in (("alpha", got[0], expected.alpha), ("beta", got[1], expected.beta)):
        if not np.isclose(value, want, rtol=1e-6, atol=0):
            raise AssertionError(f"{name} = {value:.6g}, expected {want:.6g} (the minimum of the "
                                 "squared relative error; an ordinary least-squares fit gives "
                                 "a different alpha)")
    print(f"fit: alpha = {got[0] * 1e6:.2f} us, 1/beta = {1 / got[1] / 1e9:.2f} GB/s, "
          "as allreduce.cost.fit finds")


def _check_models():
    """The machines the lab "Choosing an algorithm" checks its exercises on: this course's
    reference model, and the chapter's two simulated networks."""
    from .. import cost
    from ..algorithms.auto import DEFAULT_MODEL

    return {"the reference machine": DEFAULT_MODEL, **cost.NETWORKS}


def check_choice(function) -> None:
    """Check cell for the exercise ``choose_algorithm(model, p, nbytes)`` (chapter
    "Choosing an algorithm"): it must name a candidate of ``auto`` with the smallest
    predicted time, on three machines, 2 to 4,096 ranks and 8 B to 512 MiB.  Runs here."""
    from ..algorithms.auto import CANDIDATES

    cases = 0
    for machine, model in _check_models().items():
        for p in (2, 3, 4, 5, 8, 12, 64, 100, 1024, 4096):
            for nbytes in (8 * 4**k for k in range(14)):
                got = function(model, p, nbytes)
                times = {name: model.time(name, p, nbytes) for name in CANDIDATES}
                if got not in times:
                    raise AssertionError(f"p = {p}, n = {nbytes} B: got {got!r}, expected one "
                                         f"of {', '.join(CANDIDATES)}")
                if times[got] > min(times.values()):
                    best = min(times, key=times.get)
                    raise AssertionError(
                        f"{machine}, p = {p}, n = {nbytes} B: {got} is predicted to take "
                        f"{times[got] * 1e6:.3g} us, but {best} takes {times[best] * 1e6:.3g} us")
                cases += 1
    print(f"choose_algorithm: the fastest candidate in all {cases} cases")


def check_crossover(function) -> None:
    """Check cell for the exercise ``doubling_crossover(model, p)``: the closed-form size
    in bytes at which Rabenseifner overtakes recursive doubling on a power-of-two ``p``,
    against :func:`allreduce.cost.crossover`'s bisection.  Runs here."""
    from .. import cost

    for machine, model in _check_models().items():
        for p in (2, 4, 8, 64, 1024, 4096):
            want = cost.crossover(model, "recursive_doubling", "rabenseifner", p)
            got = function(model, p)
            if want is None or got is None:
                if want is not got:
                    raise AssertionError(f"{machine}, p = {p}: got {got!r}, expected {want!r}")
                continue
            if not np.isclose(got, want, rtol=1e-6):
                raise AssertionError(f"{machine}, p = {p}: got {got:.6g} B, bisection of the "
                                     f"model gives {want:.6g} B")
    print("doubling_crossover: agrees with the model's bisection on 3 machines, p = 2 to 4,096")


def check_busbw(function) -> None:
    """Check cell for the exercise ``busbw(nbytes, seconds, p)`` (chapter "Allreduce on
    GPUs: NCCL"), against :func:`allreduce.cost.busbw`.  Runs here."""
    from .. import cost

    for p in (1, 2, 3, 4, 8, 1024):
        for nbytes, seconds in ((1024, 1e-5), (1 << 30, 0.01), (12345, 3.5e-3)):
            got, want = function(nbytes, seconds, p), cost.busbw(nbytes, seconds, p)
            if not np.isclose(got, want, rtol=1e-9):
                raise AssertionError(f"p = {p}, n = {nbytes} B in {seconds} s: got {got:.6g} "
                                     f"B/s, expected {want:.6g} B/s")
    print("busbw: agrees with nccl-tests' definition for p = 1 to 1,024")


def check_ddp_buckets(function) -> None:
    """Check cell for the exercise ``ddp_buckets(sizes, cap)``: the buckets DDP reduces after
    its rebuild (:func:`allreduce.ddp_buckets.ddp_buckets`, checked against a real DDP by
    the test suite).  Runs here."""
    from ..ddp_buckets import ddp_buckets

    rng = np.random.default_rng(0)
    cases = [([4, 4, 4], 8), ([10, 2, 3], 4), ([], 8), ([1] * 7, 3)]
    cases += [(list(rng.integers(1, 100, rng.integers(1, 30))), int(rng.integers(50, 300)))
              for _ in range(50)]
    for sizes, cap in cases:
        want = ddp_buckets(sizes, cap)
        got = function(sizes, cap)
        if [list(b) for b in got] != want:
            raise AssertionError(f"sizes {sizes}, cap {cap}: got {got}, expected {want}")
    print(f"ddp_buckets: the buckets DDP would make, in {len(cases)} cases")


def _overlap_check(attach, steps: int) -> str | None:
    """On each engine: train with the student's hooks and without overlap; compare."""
    from mpi4py import MPI

    from ..training import train

    world = MPI.COMM_WORLD
    private = world.Dup()
    try:
        plain = train(private, average="per_tensor", steps=steps)
        overlapped = train(private, average="overlap", attach=attach, steps=steps)
    finally:
        private.Free()
    if overlapped.weights.tobytes() != plain.weights.tobytes():
        worst = int(np.argmax(np.abs(overlapped.weights - plain.weights)))
        return (f"rank {world.rank}: after {steps} steps weight {worst} is "
                f"{overlapped.weights[worst]:.6g} with your hooks, {plain.weights[worst]:.6g} "
                "without overlap (is every gradient submitted exactly once?)")
    return None


def check_overlap(view, function: str, *, steps: int = 5, timeout: float = 60) -> None:
    """Check cell for the exercise ``attach_overlap(model, thread)`` (the capstone): train
    on the engines with the student's hooks and without overlap; the weights must be the
    same bits."""
    import ipyparallel as ipp

    result = view.apply_async(_overlap_check, ipp.Reference(function), steps)
    try:
        problems = [p for p in result.get(timeout=timeout) if p]
    except ipp.error.TimeoutError:
        raise TimeoutError(f"{function}: training did not finish within {timeout:.0f} s on "
                           "every rank: were the gradients submitted in a different order on "
                           "different ranks?  Restart the kernel and run again.") from None
    if problems:
        raise AssertionError(problems[0])
    print(f"{function}: the same weights as without overlap after {steps} steps, on "
          f"{len(view)} ranks")
