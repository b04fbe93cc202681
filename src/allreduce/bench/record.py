"""What a benchmark run leaves: the model fitted to its rows on the critical path of each
whole call, the nccl-tests-style report, and a plot (chapter "Choosing an algorithm")."""

from __future__ import annotations

from pathlib import Path

from .table import Row

def call_terms(row: Row, *, in_band: bool = True):
    """The cost terms of the whole call a row timed: its algorithm's, as traced
    (:func:`allreduce.cost.terms`; ``auto`` as the algorithm it chose), plus, where the
    call's check travels in band (over MPI), the check's
    (:func:`allreduce.validation.in_band_terms`): header-only rounds before every algorithm
    but recursive doubling of at most the row's ``in_band_limit``."""
    from .. import cost
    from ..algorithms.auto import choose
    from ..validation import in_band_terms

    name = choose(row.nbytes, row.ranks) if row.name == "auto" else row.name
    own = cost.terms(name, row.ranks, row.nbytes)
    if not in_band:
        return own
    return own + in_band_terms(name, row.ranks, row.nbytes, limit=row.in_band_limit)


def fit_model(rows: list[Row], peers: list[str], *, in_band: bool = True):
    """Fit α, β, γ and the per-call overhead to this run's own algorithm rows, each
    described by the critical path of its whole call (:func:`call_terms`), on relative error;
    return the model and the rows with their predicted times.  ``in_band``: the rows were
    timed over a transport whose check travels in band (MPI; not torch.distributed)."""
    from .. import cost

    mine = [row for row in rows if row.name not in peers and row.ranks > 1]
    if len(mine) < 3:
        return None, rows
    model = cost.fit([call_terms(row, in_band=in_band) for row in mine],
                     [row.seconds for row in mine], overhead=True)

    def predict(row: Row) -> float | None:
        if row.name in peers or row.ranks == 1:
            return None
        return model.predict(call_terms(row, in_band=in_band))

    return model, [Row(**{**row.__dict__, "predicted": predict(row)}) for row in rows]


def format_table(rows: list[Row], peers: list[str]) -> str:
    """The rows in nccl-tests' columns, with each row's ratio to the best peer, and the
    average bus bandwidth of each algorithm at the end."""
    head = (f"{'size':>12} {'count':>11} {'type':>8} {'redop':>6} {'algorithm':>24} "
            f"{'time':>10} {'algbw':>8} {'busbw':>8} {'#wrong':>7} {'vs best peer':>13} "
            f"{'model':>10} {'error':>6}")
    units = (f"{'(B)':>12} {'(elements)':>11} {'':>8} {'':>6} {'':>24} "
             f"{'(us)':>10} {'(GB/s)':>8} {'(GB/s)':>8} {'':>7} {'(busbw)':>13} "
             f"{'(us)':>10} {'':>6}")
    lines = [head, units]
    for row in rows:
        ratio = f"{row.peer_ratio:.2f}x" if row.peer_ratio is not None else "-"
        model = f"{row.predicted * 1e6:>10.1f}" if row.predicted else f"{'-':>10}"
        error = (f"{(row.predicted - row.seconds) / row.seconds:>+6.0%}" if row.predicted
                 else f"{'-':>6}")
        lines.append(f"{row.nbytes:>12} {row.count:>11} {row.dtype:>8} {row.op:>6} "
                     f"{row.name:>24} {row.seconds * 1e6:>10.1f} {row.algbw / 1e9:>8.3f} "
                     f"{row.busbw / 1e9:>8.3f} {row.wrong:>7} {ratio:>13} {model} {error}")
    lines.append("")
    for name in dict.fromkeys(row.name for row in rows):
        mine = [row.busbw for row in rows if row.name == name]
        lines.append(f"# Avg bus bandwidth {name:>24}: {sum(mine) / len(mine) / 1e9:.3f} GB/s")
    lines.append(f"# peers: {', '.join(peers)}; ratios are busbw over the best peer's at the "
                 "same size (higher is better)")
    return "\n".join(lines)


def _plot(rows: list[Row], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5), constrained_layout=True)
    for name in dict.fromkeys(row.name for row in rows):
        mine = [row for row in rows if row.name == name]
        ax.semilogx([r.nbytes for r in mine], [r.busbw / 1e9 for r in mine], "o-", label=name)
    ax.set_xlabel("size per rank (bytes)")
    ax.set_ylabel("busbw (GB/s)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.savefig(path, dpi=100)
