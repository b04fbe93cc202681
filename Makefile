# The two commands a new user needs are `make book` and `make test`.
# Every target builds .venv (Python 3.11) first when it is missing or older than
# pyproject.toml, so each works on a fresh clone with nothing installed.

PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# torch: PyPI's torch for Linux is the CUDA build, which brings several GB of NVIDIA's
# libraries as pip packages.  So a Linux machine without an NVIDIA driver (no nvidia-smi)
# first installs the CPU build from PyTorch's own index (its +cpu local version satisfies
# the pin; its dependencies then come from PyPI), a machine that keeps CPU wheels in
# WHEEL_DIR takes them from there (only without a GPU: they are CPU builds), and a GPU
# machine, or macOS, takes PyPI's.
# TORCH_INDEX=URL picks another index (another CUDA build, say); TORCH_INDEX= (empty) keeps
# PyPI's build.  If the install from the index fails, PyPI's build is installed, and make
# says so.  A .venv that already holds the pinned torch keeps it: `make clean` first to
# change builds.
WHEEL_DIR   ?= /opt/wheels
NO_GPU      := $(if $(shell command -v nvidia-smi 2>/dev/null),,$(filter Linux,$(shell uname -s)))
WHEELS      := $(if $(NO_GPU),$(if $(wildcard $(WHEEL_DIR)),--find-links $(WHEEL_DIR)))
TORCH_INDEX ?= $(if $(WHEELS),,$(if $(NO_GPU),https://download.pytorch.org/whl/cpu))
TORCH_PIN   := $(shell sed -n 's/^ *"\(torch==[^"]*\)".*/\1/p' pyproject.toml)

.PHONY: book test lab student grade bench publish venv clean help

help:
	@echo "make book   build the HTML book into _build/html (executes its code)"
	@echo "make test   run every test: library, MPI at 1-5 ranks, torch gloo, every lab against its key,"
	@echo "            student copies and grading, the book, and a browser"
	@echo "make lab    open JupyterLab on the student copies in student/ (made when missing)"
	@echo "make lab KEYS=1  open JupyterLab on the instructor keys in labs/ instead"
	@echo "make student  write the missing student copies of every lab into student/ (solutions stubbed)"
	@echo "make student FORCE=1  replace them all, after moving the old ones to student/.old/"
	@echo "make grade LAB=labs/50_ring_allreduce.ipynb SUBMISSIONS=dir/  grade in sandboxes into grades/ (studyguide/instructor.md)"
	@echo "make bench  allreduce-bench on 4 MPI ranks, 1 KiB to 64 MiB, against MPI_Allreduce and torch gloo"
	@echo "make publish REMOTE=R  build the book, push it to gh-pages of R and the student copies to its 'student' (R: a repository students may read)"
	@echo "make venv   only create .venv and install the package with all extras"
	@echo "make clean  remove _build and .venv"

$(STAMP): pyproject.toml etc/ipython/ipython_kernel_config.py
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; install Python 3.11 or run make PYTHON=/path/to/python3.11"; exit 1; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(if $(TORCH_INDEX),$(BIN)/python -m pip install --quiet --no-deps --index-url $(TORCH_INDEX) "$(TORCH_PIN)" || echo "note: could not install $(TORCH_PIN) from $(TORCH_INDEX); PyPI's build instead")
	$(BIN)/python -m pip install --quiet $(WHEELS) -e ".[all]"
	@# the kernels' configuration (quiets a warning that is moot on loopback: see the file)
	install -D -m 644 etc/ipython/ipython_kernel_config.py $(VENV)/etc/ipython/ipython_kernel_config.py
	@touch $(STAMP)

venv: $(STAMP)

book: $(STAMP)
	$(BIN)/jupyter-book build . --path-output . -W -n --keep-going
	@echo "The book is in _build/html/index.html"

test: $(STAMP)
	$(BIN)/python -m pytest

# make lab opens the student copies in student/ and make student writes them: both run
# allreduce-student, which writes only the copies that are missing and says which it kept,
# so a student's work is never overwritten; FORCE=1 (make student only) replaces them,
# after moving each old copy to student/.old/TIMESTAMP/.  KEYS=1 opens the instructor
# keys in labs/.  Root (containers, many cloud notebooks) gets --allow-root, which
# JupyterLab otherwise refuses to start without.  The kernels get CurveZMQ keys from the
# server (transport_encryption=auto).  LAB_ARGS passes more options, e.g. --no-browser.
# A server already running on the folder (allreduce.lab.server reads the runtime directory,
# as jupyter server list does) is named instead of starting a second one.  JUPYTER_LAB is
# the command that starts the server (the tests replace it with echo).
STUDENT     ?= student
KEYS_ON     := $(filter 1 yes true,$(KEYS))
FORCE_ON    := $(filter 1 yes true,$(FORCE))
LAB_DIR     := $(if $(KEYS_ON),labs,$(STUDENT))
AS_ROOT     := $(if $(filter 0,$(shell id -u)),--allow-root)
LAB_ARGS    ?=
JUPYTER_LAB ?= $(BIN)/jupyter lab

lab: $(STAMP)
	$(if $(KEYS_ON),,$(BIN)/allreduce-student labs/*.ipynb --out "$(STUDENT)")
	$(BIN)/python -m allreduce.lab.server "$(LAB_DIR)" || \
	$(JUPYTER_LAB) $(AS_ROOT) --ServerApp.root_dir="$(LAB_DIR)" \
	  --MappingKernelManager.transport_encryption=auto $(LAB_ARGS)

student: $(STAMP)
	$(BIN)/allreduce-student labs/*.ipynb --out "$(STUDENT)" $(if $(FORCE_ON),--force)

grade: $(STAMP)
	@test -n "$(LAB)" -a -n "$(SUBMISSIONS)" || { echo "usage: make grade LAB=labs/NN_lab.ipynb SUBMISSIONS=folder/ [OUT=grades/scores.csv] [JOBS=1] [FORMAT=csv|canvas]"; exit 2; }
	$(BIN)/allreduce-grade "$(LAB)" "$(SUBMISSIONS)" --out "$(or $(OUT),grades/scores.csv)" --jobs "$(or $(JOBS),1)" --format "$(or $(FORMAT),csv)"

BENCH_RANKS ?= 4
BENCH_ARGS  ?= -b 1K -e 64M -f 4 -a ring,pipelined_ring,rabenseifner,recursive_doubling,auto
# one compute thread per rank (see allreduce.lab.ONE_THREAD_PER_RANK); MPI_Allreduce uses none
bench: $(STAMP)
	OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 \
	$(BIN)/mpiexec -n $(BENCH_RANKS) $(BIN)/python -m mpi4py -m allreduce.bench $(BENCH_ARGS)

# jupyter-book's way to publish (ghp-import): the built book onto the gh-pages branch of
# REMOTE, and the repository with the labs as student copies onto its student branch,
# which the lab pages' launch buttons open (see src/allreduce/book.py).  REMOTE is a remote
# of this checkout, a URL or a path; point it at a repository students may read.
REMOTE ?=
publish: $(STAMP)
	@test -n "$(REMOTE)" || { echo "usage: make publish REMOTE=<a repository students may read: a remote of this checkout, a URL or a path> (never the one that holds the keys)"; exit 2; }
	$(BIN)/python -m allreduce.book --remote "$(REMOTE)" --check
	$(MAKE) book
	$(BIN)/python -m allreduce.book --html _build/html --remote "$(REMOTE)"

clean:
	rm -rf _build $(VENV)
