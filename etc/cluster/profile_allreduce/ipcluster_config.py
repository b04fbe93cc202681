# An ipyparallel profile for the course's labs on a cluster (chapter "The allreduce library",
# section "On a cluster").
#
# Use it by its folder, with nothing to install:
#     ALLREDUCE_IPP_PROFILE=$PWD/etc/cluster/profile_allreduce   (allreduce.lab.start reads it)
#     .venv/bin/ipcluster start -n 4 --profile-dir=etc/cluster/profile_allreduce   (by hand, to
#     try it; .venv/bin/ipcluster stop --profile-dir=... ends it)
# or copy the folder to ~/.ipython/profile_allreduce and give its name, "allreduce".
# tests/test_launch.py starts ipcluster from this file and runs a lab check on it.
c = get_config()  # noqa: F821 (ipyparallel defines get_config when it reads this file)

# The engines are the ranks of one MPI job: engine i is rank i of MPI.COMM_WORLD, as the
# labs' %%px cells expect.  ("slurm" would submit the engines as a job of their own, and
# "ssh" would start them host by host, but then they are not one MPI job.)
c.Cluster.engine_launcher_class = "mpi"

# The course environment's own mpiexec (MPICH), beside the Python that reads this file (the
# notebook's kernel, or .venv/bin/ipcluster), which inside a Slurm allocation starts its
# processes on the allocation's nodes (the one on PATH where there is none beside it).  With
# the cluster's MPI instead, name it here or in
# ALLREDUCE_MPIEXEC, e.g. ["srun", "--mpi=pmi2"] or ["/opt/openmpi/bin/mpiexec"].
import os  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402

_beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
c.MPILauncher.mpi_cmd = [_beside if os.path.exists(_beside)
                         else shutil.which("mpiexec") or "mpiexec"]

# One compute thread per rank (see allreduce.launch.ONE_THREAD_PER_RANK).
c.MPIEngineSetLauncher.environment = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
                                      "MKL_NUM_THREADS": "1"}

# Engines on other hosts must reach the controller, so it listens on every interface (the
# engines still need the connection file's key); on one machine "127.0.0.1" is enough.
c.Cluster.controller_ip = "*"
