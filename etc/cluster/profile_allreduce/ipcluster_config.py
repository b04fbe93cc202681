# An ipyparallel profile for the course's labs on a cluster (README "On a cluster").
#
# Use it by its folder, with nothing to install:
#     ALLREDUCE_IPP_PROFILE=$PWD/etc/cluster/profile_allreduce   (allreduce.lab.start reads it)
#     ipcluster start -n 4 --profile-dir=etc/cluster/profile_allreduce   (by hand)
# or copy the folder to ~/.ipython/profile_allreduce and give its name, "allreduce".
# tests/test_launch.py starts ipcluster from this file and runs a lab check on it.
c = get_config()  # noqa: F821 (ipyparallel defines get_config when it reads this file)

# The engines are the ranks of one MPI job: engine i is rank i of MPI.COMM_WORLD, as the
# labs' %%px cells expect.  ("slurm" would submit the engines as a job of their own, and
# "ssh" would start them host by host, but then they are not one MPI job.)
c.Cluster.engine_launcher_class = "mpi"

# The mpiexec on PATH: the course environment's own (MPICH), which inside a Slurm allocation
# starts its processes on the allocation's nodes.  With the cluster's MPI instead, name it
# here or in ALLREDUCE_MPIEXEC, e.g. ["srun", "--mpi=pmi2"] or ["/opt/openmpi/bin/mpiexec"].
c.MPILauncher.mpi_cmd = ["mpiexec"]

# One compute thread per rank (see allreduce.launch.ONE_THREAD_PER_RANK).
c.MPIEngineSetLauncher.environment = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
                                      "MKL_NUM_THREADS": "1"}

# Engines on other hosts must reach the controller: on a cluster, let it listen on every
# interface ("*"); on one machine the default (127.0.0.1) is enough.
# c.Cluster.controller_ip = "*"
