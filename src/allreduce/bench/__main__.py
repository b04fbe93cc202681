"""``python -m allreduce.bench``: what ``make bench``, ``allreduce-bench`` and the book's sweeps
run (:func:`allreduce.bench.cli.main`)."""

from .cli import main

main()
