"""The MPI launcher the Python program tests use.

ctest passes the launcher CMake found (the MPI zerodl is built against) and its flags in
ZDL_MPIEXEC and ZDL_MPIEXEC_PREFLAGS; run by hand, the tests take PATH's mpirun. A launcher
ctest names must exist: a test fails rather than skip a capability the setup installed.
"""
import os
import shutil

_given = os.environ.get("ZDL_MPIEXEC", "")
if _given and not (os.path.isfile(_given) and os.access(_given, os.X_OK)):
    raise SystemExit(f"ZDL_MPIEXEC={_given!r} is not an executable (the launcher CMake found is gone?)")
MPIRUN = _given or shutil.which("mpirun")
PREFLAGS = os.environ.get("ZDL_MPIEXEC_PREFLAGS", "").split()
# Either MPI runs as root and oversubscribed in CI (MPICH needs nothing; OpenMPI these).
MPI_ENV = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")


def command(exe, args, ranks):
    """exe with args, alone (ranks = 0) or under the launcher with `ranks` ranks."""
    return [MPIRUN, *PREFLAGS, "-np", str(ranks), exe, *args] if ranks else [exe, *args]


def mpmd(exe, args0, args1):
    """Two ranks started with different arguments (`mpirun -np 1 A : -np 1 B`)."""
    return [MPIRUN, *PREFLAGS, "-np", "1", exe, *args0, ":", "-np", "1", exe, *args1]
