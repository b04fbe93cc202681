"""Timing allreduce the way the field does (nccl-tests, OSU): warm-up, barrier, time, take
the slowest rank, and check every result.  The algorithms and peers of one size are timed
in interleaved rounds, so that a shared machine's drift hits them alike.  One module each:
``timing`` (the timed loop), ``sweep`` (the book's measurements), ``table`` (the benchmark's
rows), ``record`` (the fitted model and the report), ``cli`` (the command).

* The labs and the book's pages measure with :func:`sweep` (ring steps, local adds and
  algorithms over an mpi4py communicator; :func:`run_sweep` starts it under ``mpiexec``)
  and :func:`fit_step_model`.  Taught in the chapter "Ring allreduce".
* ``allreduce-bench`` (:func:`main`) prints the nccl-tests table with the MPI library's and
  torch's own allreduce as peers, under ``mpiexec`` or ``torchrun``.
"""

from .cli import main, parse_size, size_range
from .record import call_terms, fit_model, format_table
from .sweep import fit_step_model, run_sweep, sweep
from .table import Row, run_table
from .timing import (PEER, ROUNDS, Timing, _interleaved, time_allreduce, time_allreduces,  # noqa: F401
                     time_pingpong, time_reduce, time_sendrecv)

__all__ = ["PEER", "ROUNDS", "Row", "Timing", "call_terms", "fit_model", "fit_step_model",
           "format_table", "main", "parse_size", "run_sweep", "run_table", "size_range",
           "sweep", "time_allreduce", "time_allreduces", "time_pingpong", "time_reduce",
           "time_sendrecv"]
