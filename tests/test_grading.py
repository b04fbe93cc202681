"""Student copies and grading: real sandboxes, real rank processes, real messages.

The slow tests grade hostile submissions end to end with ``allreduce-grade --jobs 2``: on
the ring lab (every attack the issue lists) and on the naive-allreduce lab (the cheats and
the limits), then every lab's key and untouched student copy.  Each hostile submission must
score 0 where it cheats, or its correct code's score where only a side effect was hostile,
leave no process behind and change nothing outside its run."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import time
import uuid
from pathlib import Path

import nbformat
import numpy as np
import pytest

from allreduce import grading
from allreduce.grading import notebooks, similarity
from allreduce.grading.sandbox import probe
from allreduce.lab.patterns import PATTERNS

RING = "labs/50_ring_allreduce.ipynb"
NAIVE = "labs/30_naive_allreduce.ipynb"
LABS = sorted(p.name for p in (Path(__file__).parent.parent / "labs").glob("*.ipynb"))
RUN = uuid.uuid4().hex  # this test run: in the environment of every process it starts
os.environ["ALLREDUCE_TEST_RUN"] = RUN  # (the sandboxes' bwrap keep it; inside, it is cleared)
MARK = f"allreduce-hostile-detached-{RUN}"  # in the command line of what a submission leaves

_NO_SANDBOX = probe()  # None where bwrap can start a sandbox (as root, or with user namespaces)
# CI runs as root and can always sandbox: there (.ci/run sets it) a missing sandbox fails
REQUIRE_SANDBOX = os.environ.get("ALLREDUCE_REQUIRE_SANDBOX") == "1"


@pytest.fixture
def sandbox_here():
    """Skip where no sandbox can start (tests/conftest.py then ends the run with a banner),
    or fail there when ``ALLREDUCE_REQUIRE_SANDBOX=1``."""
    if _NO_SANDBOX is not None:
        if REQUIRE_SANDBOX:
            pytest.fail(f"ALLREDUCE_REQUIRE_SANDBOX=1, but no sandbox starts here: {_NO_SANDBOX}")
        pytest.skip(f"no sandbox here: {_NO_SANDBOX}")


needs_sandbox = pytest.mark.usefixtures("sandbox_here")


@pytest.fixture
def key(root):
    return nbformat.read(root / RING, as_version=4)


# -- marking up, student copies, what a run gets ------------------------------------------------

def test_stub_keeps_the_indentation_and_names_the_exercise():
    source = "def f():\n    for i in x:\n        ### BEGIN SOLUTION\n        y = 1\n        ### END SOLUTION\n    return 2"
    assert grading.stub_solutions(source, "ex") == (
        "def f():\n    for i in x:\n"
        '        raise NotImplementedError("exercise ex: replace this line with your solution")\n'
        "    return 2")
    with pytest.raises(ValueError, match="without"):
        grading.stub_solutions("### BEGIN SOLUTION\nx = 1", "ex")


def test_student_copy_has_no_solutions_shows_points_and_keeps_the_rest(key):
    student = grading.student_copy(key)
    assert nbformat.writes(grading.student_copy(key)) == nbformat.writes(student)  # stable
    assert grading.exercises(key) == ["reduce_scatter", "allgather"]
    points = [c for c in student.cells if grading.role(c) and grading.role(c)[1] == "points"]
    assert [c.source.split("**")[1] for c in points] == [
        "Exercise `reduce_scatter`: 3 points", "Exercise `allgather`: 2 points"]
    theirs = [c for c in student.cells if c not in points]
    for mine, copy in zip(key.cells, theirs, strict=True):
        if grading.role(mine) and grading.role(mine)[1] == "solution":
            assert grading.BEGIN in mine.source and grading.BEGIN not in copy.source
            assert "sendrecv" not in copy.source  # the solution's own lines are gone
            assert "NotImplementedError" in copy.source
        elif mine.cell_type == "code" and not grading.role(mine):  # marked as the lab's own
            assert copy.metadata.pop("allreduce") == {"role": "lab"}  # (for --self)
            assert mine == copy  # outputs kept: the student sees what each cell prints
        else:
            assert mine == copy


def test_a_points_cell_says_what_its_kind_of_check_looks_at(root):
    """It said "the values and the messages your code sends" of a formula checked in the
    kernel too."""
    said = {}
    for name in ("65_beyond_ring", "80_capstone"):
        student = grading.student_copy(nbformat.read(root / "labs" / f"{name}.ipynb", 4))
        said.update({grading.role(c)[0]: c.source for c in student.cells
                     if grading.role(c) and grading.role(c)[1] == "points"})
    assert "checks the values and the messages" in said["zero2_step"]
    assert "checks what your function returns" in said["torus_cost"]
    assert "checks the weights your hooks train to" in said["attach_overlap"]


@pytest.mark.parametrize("name", LABS)
def test_every_lab_states_its_checks(root, name):
    """Each exercise's check cell names the function, the check, the pattern and points."""
    nb = nbformat.read(root / "labs" / name, as_version=4)
    specs = grading.specs(nb)
    assert [s.exercise for s in specs] == grading.exercises(nb)
    assert all(s.points > 0 for s in specs), specs
    assert len(specs) == 1 or len({s.points for s in specs}) > 1, specs  # set, not equal
    for s in specs:
        assert s.kind in ("ranks", "local", "overlap")
        assert s.kind != "ranks" or s.pattern, s  # every algorithm exercise has a pattern
    # the text before an algorithm's check cell names the other rank counts the grader runs
    # it on (Pattern.ranks) and, where it takes a buffer, the float32 case
    for index, cell in enumerate(nb.cells):
        role = grading.role(cell)
        if role is None or role[1] != "check":
            continue
        spec = next(s for s in specs if s.exercise == role[0])
        text = nb.cells[index - 1].source
        if spec.kind != "ranks" or not text.startswith("**Check.**"):
            continue  # (a second check cell of an exercise has the first one's text)
        others = [str(r) for r in PATTERNS[spec.pattern].ranks[1:]]
        assert f"on {' and '.join(others)} ranks" in text, (spec.exercise, text)
        assert ("float32" in text) == (spec.phase != "average_gradients"), (spec.exercise, text)


def test_a_run_gets_only_its_exercise_and_the_labs_imports(key):
    submission = grading.student_copy(key)
    spec = grading.spec(key, "allgather")
    code = grading.graded_code(key, submission, spec)
    assert "NotImplementedError" in code.solution[0]  # the student's allgather
    assert "sendrecv" not in code.setup + "".join(code.solution)  # no solution of the key
    assert "import numpy as np" in code.setup and "from allreduce import chunk_bounds" in code.setup
    assert {"world", "comm"} <= set(code.stubs)  # assigned by the lab: placeholders in a run
    del submission.cells[[grading.role(c) for c in submission.cells].index(
        ("allgather", "solution"))]
    with pytest.raises(LookupError, match="no solution cell for exercise 'allgather' "
                       r"\(was it deleted\?\): only the cell of the student copy that said "
                       "'exercise allgather: replace this line with your solution' is graded"):
        grading.graded_code(key, submission, spec)


@needs_sandbox
def test_a_solution_cell_split_in_two_is_graded_whole(key):
    """JupyterLab's split keeps the cell's metadata in both halves: the key's solution split
    into a helper cell and the function scored 0 ("were cells deleted?"); both run, in order."""
    from allreduce.grading import run

    spec = grading.spec(key, "reduce_scatter")
    submission = nbformat.from_dict(key)
    index = [grading.role(c) for c in submission.cells].index(("reduce_scatter", "solution"))
    cell = submission.cells[index]
    helper = nbformat.v4.new_code_cell("%%px --no-stream\nimport numpy as np  # a half of it\n",
                                       metadata=dict(cell.metadata))
    submission.cells.insert(index, helper)
    code = grading.graded_code(key, submission, spec)
    assert len(code.solution) == 2 and code.cells == (index + 1, index + 2)
    assert run.run_exercise(spec, code, timeout=30).score == 1


def test_make_student_writes_the_copies(root, venv_bin, tmp_path):
    run = subprocess.run([venv_bin / "allreduce-student", root / RING, "--out", tmp_path / "s"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    copy = nbformat.read(tmp_path / "s" / "50_ring_allreduce.ipynb", as_version=4)
    assert not any(grading.BEGIN in c.source for c in copy.cells)


def test_make_student_on_the_published_student_branch_copies_its_labs(root, venv_bin, tmp_path):
    """The published ``student`` branch holds the labs already stubbed (book.student_tree):
    ``make student`` there raised "has no ### BEGIN SOLUTION", and ``make lab`` never
    started.  A lab that is a student copy already is copied as it is."""
    from allreduce import book

    labs = sorted((root / "labs").glob("*.ipynb"))
    tree = book.student_tree(root, labs, tmp_path / "published")
    run = subprocess.run([venv_bin / "allreduce-student", *sorted((tree / "labs").glob("*.ipynb")),
                          "--out", tmp_path / "s"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    for lab in labs:
        published = nbformat.read(tree / "labs" / lab.name, as_version=4)
        mine = nbformat.read(tmp_path / "s" / lab.name, as_version=4)
        assert [c.source for c in mine.cells] == [c.source for c in published.cells], lab.name
        assert not any(grading.BEGIN in c.source for c in mine.cells)
    half = nbformat.read(root / RING, as_version=4)  # a key with one region removed by hand
    for cell in half.cells:
        if grading.role(cell) == ("allgather", "solution"):
            cell.source = "def allgather(buf, comm):\n    pass\n"
    with pytest.raises(ValueError, match="has no ### BEGIN SOLUTION"):
        grading.student_copy(half)


def test_similarity_ignores_names_comments_and_layout():
    a = "def f(buf, comm):\n    x = 1  # mine\n    return comm.send(buf, x)\n"
    b = "def f(data,   c):\n\n    y = 1\n    return c.send(data, y)"
    assert similarity.normalise(a) == similarity.normalise(b)
    assert similarity.normalise(a) != similarity.normalise(a.replace("send", "recv"))


# -- one submission cannot stop the grading, or the judge's limits -------------------------------

def test_a_header_nested_deeper_than_json_goes_is_a_protocol_error():
    """A rank's frame of 200,000 '[' made json.loads raise RecursionError, which left the
    judge and stopped the whole grading run."""
    from allreduce.grading import wire

    with pytest.raises(wire.WireError, match="malformed header .*RecursionError"):
        wire.Reader().feed(struct.pack("!I", 200_000) + b"[" * 200_000)


def test_a_loading_cut_short_by_the_exercise_s_budget_says_so():
    """Loading got what was left of the exercise's time and said only "took longer than
    0.63 s"."""
    import socket

    from allreduce.grading import run
    from allreduce.grading.judge import Failure, Judge

    pairs = [socket.socketpair() for _ in range(2)]
    judge = Judge([ours for ours, _ in pairs])
    try:
        with pytest.raises(Failure, match=r"^loading your code took longer than 0\.3 s \(in "
                           r"what was left of the exercise's time\)$"):
            judge.setup({"op": "setup"}, 0.3, run._LEFT)  # no rank answers
    finally:
        judge.close()
        for _, theirs in pairs:
            theirs.close()


def test_a_ranks_own_loading_error_is_not_replaced_by_its_exit():
    """A rank that reported why it could not load (a syntax error) and then exited, as every
    rank does, was reported as "ended without answering: it was killed (over its memory
    ...)": the end of its connection, read after its error, overwrote it."""
    import socket
    import threading

    from allreduce.grading import wire
    from allreduce.grading.judge import Failure, Judge

    pairs = [socket.socketpair() for _ in range(4)]

    def rank(theirs, number):
        wire.receive(theirs, wire.Reader())
        time.sleep(0.01 * number)
        wire.send(theirs, {"op": "error", "message": f"rank {number}: does not parse"})
        theirs.close()

    threads = [threading.Thread(target=rank, args=(theirs, number))
               for number, (_, theirs) in enumerate(pairs)]
    for thread in threads:
        thread.start()
    judge = Judge([ours for ours, _ in pairs])
    try:
        with pytest.raises(Failure, match=r"^rank 0: does not parse$"):
            judge.setup({"op": "setup"}, 10)
    finally:
        judge.close()
        for thread in threads:
            thread.join()


def test_the_whole_frames_before_a_broken_one_are_kept():
    """A rank that broke the protocol is judged on what it sent whole before (they were
    dropped with the error)."""
    from allreduce.grading import wire

    whole = wire.pack({"op": "barrier"}) + wire.pack({"op": "result"}, [b"ab"])
    with pytest.raises(wire.WireError) as broken:
        wire.Reader().feed(whole + struct.pack("!I", 5) + b"{bad}")
    assert [header["op"] for header, _ in broken.value.frames] == ["barrier", "result"]


class _Quiet:
    """The judge's side of a case, without sockets: what it sends is dropped."""

    def __init__(self, size: int):
        self.size, self.sent = size, []

    def send(self, rank, header, blobs=()):
        self.sent.append((rank, header, [len(b) for b in blobs]))


def test_a_wait_for_malformed_request_ids_fails_that_case_only():
    """`{"op": "wait", "ids": [[1]]}` made the judge raise TypeError (unhashable list).  The
    case fails once no rank can go on, with that rank's reason."""
    from allreduce.grading.matching import Case, Failure

    for ids in ([[1]], [{"a": 1}], [1.5], "1", [None], [7]):
        case = Case(_Quiet(2))
        case.handle(0, {"op": "wait", "ids": ids}, [])
        with pytest.raises(Failure, match="rank 0 waited for a request it never made"):
            case.handle(1, {"op": "result"}, [])


@pytest.mark.parametrize("frame, says", [
    ({"op": "wait", "ids": [3]}, "rank 1 waited for a request it never made"),
    ("twice", "rank 1 waited for one request twice in one wait"),
    ({"op": "gossip"}, "rank 1 sent the grader an unknown request 'gossip'"),
    ({"op": "isend", "id": 1, "peer": 9, "tag": 0, "dtype": "uint8", "count": 0},
     "rank 1 addressed rank 9, but the ranks are 0..3"),
    ("out of turn", r"rank 1 spoke out of turn \(barrier\)"),
    ("lost", "rank 1's process ended"),
])
def test_a_refused_request_names_the_lowest_rank_whichever_came_first(frame, says):
    """Ranks 3 and 1 break the protocol the same way, 3 first: the case names rank 1, as it
    would had 1 come first (these named whichever rank's frame came first)."""
    from allreduce.grading.matching import Case, Failure

    case = Case(_Quiet(4))
    for rank in (3, 1):
        if frame == "out of turn":  # a second frame while it waits in a barrier
            case.handle(rank, {"op": "barrier"}, [])
            case.handle(rank, {"op": "barrier"}, [])
        elif frame == "lost":  # what the judge gives for a process that ended
            case.lose(rank, f"rank {rank}'s process ended without answering")
        elif frame == "twice":  # a real request, waited for twice (the judge raised KeyError)
            _message(case, rank, "irecv", 1, (rank + 1) % 4, 0)
            case.handle(rank, {"op": "wait", "ids": [1, 1]}, [])
        else:
            case.handle(rank, frame, [])
    case.handle(0, {"op": "result"}, [])
    with pytest.raises(Failure, match=says):
        case.handle(2, {"op": "result"}, [])


def _send(case, rank, peer, data: bytes, request: int = 1):
    case.handle(rank, {"op": "isend", "id": request, "peer": peer, "tag": 0, "dtype": "uint8",
                       "count": len(data)}, [data])


@pytest.mark.parametrize("first", [3, 1])
def test_a_message_s_content_is_judged_the_same_whichever_rank_sent_first(first):
    """The first wrong message in the order frames came was reported: five gradings of one
    submission named five different ones."""
    from allreduce.grading.matching import Case

    taught = {(1, 0): [b"\x01"], (3, 2): [b"\x03"]}
    case = Case(_Quiet(4), taught)
    for rank in (first, 4 - first):
        _send(case, rank, rank - 1, b"\x09")
    assert case._content().startswith("rank 1's message 1 to rank 0 did not hold")


@pytest.mark.parametrize("first", [3, 1])
def test_a_size_mismatch_names_the_lowest_sender_whichever_came_first(first):
    from allreduce.grading.matching import Case, Failure

    case = Case(_Quiet(4))
    for rank in (first, 4 - first):  # rank r sends 1 byte to r - 1, which posted 2
        _send(case, rank, rank - 1, b"\x00")
        _message(case, rank - 1, "irecv", 1, rank, 2)
    for rank in (3, 1):
        case.handle(rank, {"op": "result"}, [])
    case.handle(0, {"op": "wait", "ids": [1]}, [])
    with pytest.raises(Failure, match=r"^rank 1 sent 1 uint8 element to rank 0, which posted a "
                                      "receive for 2 uint8 elements"):
        case.handle(2, {"op": "wait", "ids": [1]}, [])


def test_an_allreduce_request_of_the_wrong_types_fails_the_case_not_the_grader():
    """A list as the op raised TypeError (unhashable) inside the judge."""
    from allreduce.grading.matching import Case, Failure

    case = Case(_Quiet(2))
    header = {"op": "allreduce", "dtype": "float64", "count": 1, "reduce": ["sum"]}
    case.handle(0, header, [bytes(8)])
    with pytest.raises(Failure, match="which the grader does not reduce"):
        case.handle(1, header, [bytes(8)])


def test_a_malformed_allreduce_names_its_rank():
    from allreduce.grading.matching import Case, Failure

    case = Case(_Quiet(3))
    header = {"op": "allreduce", "dtype": "int64", "count": 2, "reduce": "sum"}
    for rank in (0, 1):
        case.handle(rank, header, [bytes(16)])  # two int64
    with pytest.raises(Failure, match="rank 2 sent the grader a malformed allreduce"):
        case.handle(2, header, [bytes(15)])


def _message(case, rank, op, request, peer, nbytes):
    header = {"op": op, "id": request, "peer": peer, "tag": 0, "dtype": "uint8",
              "count": nbytes}
    case.handle(rank, header, [bytes(nbytes)] if op == "isend" else [])


def test_the_judge_counts_matched_messages_until_their_receiver_waits(monkeypatch):
    """The cap on what the judge holds was bypassed by messages whose receive was posted
    (matched) but never waited for: 100 of 8 MiB were held with 0 counted."""
    from allreduce.grading import matching
    from allreduce.grading.matching import Case, Failure

    monkeypatch.setattr(matching, "MAX_QUEUED", 1 << 20)
    honest = Case(_Quiet(2))
    for request in range(1, 5):  # 4 x 600 KiB, each received and waited for: fine
        _message(honest, 0, "isend", request, 1, 600 << 10)
        _message(honest, 1, "irecv", request, 0, 600 << 10)
        honest.handle(1, {"op": "wait", "ids": [request]}, [])
        assert honest.queued == 0
    hoarder = Case(_Quiet(2))
    _message(hoarder, 0, "isend", 1, 1, 600 << 10)
    _message(hoarder, 1, "irecv", 1, 0, 600 << 10)  # matched, never waited for
    assert hoarder.queued == 600 << 10
    _message(hoarder, 1, "irecv", 2, 0, 600 << 10)
    with pytest.raises(Failure, match="more than 1 MiB of messages were sent and not received"):
        _message(hoarder, 0, "isend", 2, 1, 600 << 10)


def test_messages_fit_one_order_of_steps_whole():
    """Where another order of steps is as right (recursive doubling with the far partner
    first), a case's messages may follow it instead of the taught one, but all of them:
    a rank that sends one message of each order fails."""
    from allreduce.grading.matching import Case

    def content(messages, orders):
        case = Case(_Quiet(2), orders, "uint8")
        for rank, peer, data in messages:
            case._compare(rank, peer, "uint8", data)
        return case._content()

    taught = {(0, 1): [b"\x01", b"\x02"], (1, 0): [b"\x03", b"\x04"]}
    other = {(0, 1): [b"\x05", b"\x06"], (1, 0): [b"\x07", b"\x08"]}
    assert content([(0, 1, b"\x01"), (1, 0, b"\x03"), (0, 1, b"\x02")], [taught, other]) is None
    assert content([(0, 1, b"\x05"), (1, 0, b"\x07"), (1, 0, b"\x08")], [taught, other]) is None
    mixed = content([(0, 1, b"\x01"), (1, 0, b"\x07")], [taught, other])
    assert mixed and "rank 1's message 1 to rank 0" in mixed and "where the taught algorithm " \
        "has 3" in mixed, mixed
    assert content([(0, 1, b"\x05")], taught) is not None  # one order given: that one
    # a message of another length (lab 75's packet length sent as int32, not int64): said so
    assert content([(0, 1, b"\x01\x00")], taught) == "rank 0's message 1 to rank 1 held 2 " \
        "bytes (2 uint8 elements) where the taught algorithm sends 1 byte at that step: " \
        "check its length and its dtype against the lab's"
    assert content([(0, 1, b"\x01"), (0, 1, b"\x02"), (0, 1, b"\x09")],
                   [taught, other]) == "rank 0's message 3 to rank 1 is one more than the " \
        "taught algorithm sends there"


FAR_FIRST = """\
scratch = np.empty_like(buf)
mask = comm.size // 2
while mask >= 1:
    partner = comm.rank ^ mask
    comm.sendrecv(buf, partner, scratch, partner)
    comm.reduce_local(op, buf, scratch)
    mask >>= 1
return"""


@needs_sandbox
def test_recursive_doubling_with_the_far_partner_first_is_right(root):
    """Lab 40's recursive doubling with the partners taken far first (p/2 down to 1): right,
    and the lab's check cell passes it, but the grader held it to the taught order and
    scored it 0 (a fifth red-team round)."""
    result = _graded(_lab(root, "40_tree_allreduce"), "recursive_doubling", FAR_FIRST)
    assert result.score == 1, result.message


NO_CHILD_TEST = """\
p, rank = comm.size, comm.rank
mask = 1
while mask < p:
    if rank & mask:
        comm.send(buf, rank - mask)
        return
    comm.recv(scratch, rank | mask)  # without `if rank | mask < p`
    comm.reduce_local(op, buf, scratch)
    mask <<= 1
return"""

FOUR_ROUNDS = FAR_FIRST.replace("comm.size // 2", "2")  # 4 ranks' rounds, whatever p is

RING_MOD_4 = """\
p, rank, n = comm.size, comm.rank, len(buf)
incoming = np.empty(-(-n // p), dtype=buf.dtype)
for step in range(p - 1):
    send_lo, send_hi = chunk_bounds(n, p, (rank - step - 1) % 4)
    recv_lo, recv_hi = chunk_bounds(n, p, (rank - step - 2) % 4)
    comm.sendrecv(buf[send_lo:send_hi], (rank + 1) % p, incoming[: recv_hi - recv_lo],
                  (rank - 1) % p)
    comm.reduce_local(op, buf[recv_lo:recv_hi], incoming[: recv_hi - recv_lo])
return chunk_bounds(n, p, rank)"""

RING_INT64 = RING_MOD_4.replace("% 4", "% p").replace("dtype=buf.dtype", "dtype=np.int64")

SPARSE_INT64 = """\
p, rank = comm.size, comm.rank
right, left = (rank + 1) % p, (rank - 1) % p
bounds = [chunk_bounds(n, p, c) for c in range(p)]
chunks = [(indices[s], values[s]) for s in split_at(indices, bounds)]
for step in range(p - 1):
    send, receive = (rank - step - 1) % p, (rank - step - 2) % p
    packet = encode(*chunks[send], *bounds[send])
    length, their_length = np.array([len(packet)], np.int64), np.empty(1, np.int64)
    comm.sendrecv(length, right, their_length, left)
    incoming = np.empty(int(their_length[0]), np.uint8)
    comm.sendrecv(packet, right, incoming, left)
    chunks[receive] = merge([chunks[receive], decode(incoming, np.int64)], np.int64)
return chunks[rank]"""

MEAN_OVER_4 = """\
flat = np.concatenate([g.ravel() for g in grads])
total = allreduce.allreduce(flat, comm, op="sum")
pieces = np.split(total / 4, np.cumsum([g.size for g in grads])[:-1])
return [piece.reshape(g.shape) for piece, g in zip(pieces, grads)]"""


@needs_sandbox
@pytest.mark.parametrize("lab, exercise, code, wanted", [
    ("40_tree_allreduce", "binomial_reduce", NO_CHILD_TEST, "for n = 1 on 3 ranks: rank 2 addressed rank 3"),
    ("40_tree_allreduce", "recursive_doubling", FOUR_ROUNDS, "on 2 ranks: rank 0 addressed rank 2"),
    ("50_ring_allreduce", "reduce_scatter", RING_MOD_4, r"for n = \d+ on 3 ranks"),
    ("50_ring_allreduce", "reduce_scatter", RING_INT64,
     r"for n = 1001 (in float32 )?on 4 ranks.*\[in float32, after the int64 cases were right"),
    ("75_sparse", "sparse_reduce_scatter", SPARSE_INT64,
     r"for n = 1001.*\[in float32, after the int64 cases were right.*than `values`"),
    ("10_data_parallel", "average_gradients", MEAN_OVER_4, "on 2 ranks: rank 0, gradient 0"),
], ids=["binomial without child < p", "recursive doubling of two rounds", "ring with % 4",
        "ring with an int64 scratch", "sparse ring in int64", "mean over 4"])
def test_a_solution_right_only_on_four_ranks_or_in_int64_scores_0(root, lab, exercise, code,
                                                                  wanted):
    """Careless solutions a hostile round found scoring full marks when the grader ran four
    ranks and int64 only: each is right on the labs' four engines for every int64 case, and
    wrong on another number of ranks its exercise covers, or in float32 (the dtype of
    gradients).  The key's own solution passes on all of them."""
    key = _lab(root, lab)
    result = _graded(key, exercise, code)
    assert result.score == 0 and re.search(wanted, result.message), result.message
    honest = _graded(key, exercise)
    assert honest.score == 1, honest.message
    counts = " and ".join(map(str, PATTERNS[grading.spec(key, exercise).pattern].ranks[1:]))
    assert honest.message.endswith(f"; and on {counts} ranks"), honest.message


ZERO2_DDP = """\
flat_grads.copy_(allreduce.allreduce(flat_grads, comm))
flat_weights -= lr * flat_grads
return"""

ZERO2_GATHERS_GRADIENTS = """\
allreduce.reduce_scatter(flat_grads, comm)
allreduce.allgather(flat_grads, comm)
flat_weights -= lr * flat_grads
return"""

ZERO2_NO_ALLGATHER = """\
lo, hi = allreduce.reduce_scatter(flat_grads, comm)
flat_weights[lo:hi] -= lr * flat_grads[lo:hi]
return"""

ZERO2_LR_WRITTEN_IN = """\
lo, hi = allreduce.reduce_scatter(flat_grads, comm)
flat_weights[lo:hi] -= 2 * flat_grads[lo:hi]  # a learning rate the check once used
allreduce.allgather(flat_weights, comm)
return"""

ZERO2_NO_UPDATE = """\
allreduce.reduce_scatter(flat_grads, comm)
allreduce.allgather(flat_weights, comm)
return"""

ZERO2_OWN_RING = """\
p, r, n = comm.size, comm.rank, len(flat_grads)
g, w = flat_grads.numpy(), flat_weights.numpy()
incoming = np.empty(-(-n // p), dtype=g.dtype)
for s in range(p - 1):
    send_lo, send_hi = chunk_bounds(n, p, (r - s - 1) % p)
    recv_lo, recv_hi = chunk_bounds(n, p, (r - s - 2) % p)
    comm.sendrecv(g[send_lo:send_hi], (r + 1) % p, incoming[: recv_hi - recv_lo], (r - 1) % p)
    g[recv_lo:recv_hi] += incoming[: recv_hi - recv_lo]
lo, hi = chunk_bounds(n, p, r)
w[lo:hi] -= lr * g[lo:hi]
for s in range(p - 1):
    send_lo, send_hi = chunk_bounds(n, p, (r - s) % p)
    recv_lo, recv_hi = chunk_bounds(n, p, (r - s - 1) % p)
    comm.sendrecv(w[send_lo:send_hi], (r + 1) % p, w[recv_lo:recv_hi], (r - 1) % p)
return"""


ZERO2_THROUGH_API = """\
import allreduce.api as api
lo, hi = api.reduce_scatter(flat_grads, comm, op="sum")
flat_weights[lo:hi] -= lr * flat_grads[lo:hi]
api.allgather(flat_weights, comm)
return"""

RING_BY_THE_LIBRARY_PHASE = """\
return allreduce.reduce_scatter(buf, comm)"""

RING_BY_THE_API_PHASE = """\
import allreduce.api as api
return api.reduce_scatter(buf, comm)"""


@needs_sandbox
@pytest.mark.parametrize("code", [RING_BY_THE_LIBRARY_PHASE, RING_BY_THE_API_PHASE],
                         ids=["allreduce.reduce_scatter", "allreduce.api.reduce_scatter"])
def test_the_library_s_phases_are_offered_to_the_zero2_step_only(root, code):
    """The ring lab's reduce_scatter may not hand its work to the library's own, which a
    graded run of lab 65's ZeRO-2 step offers."""
    result = _graded(_lab(root, "50_ring_allreduce"), "reduce_scatter", code)
    assert result.score == 0 and re.search(
        r"allreduce(\.api)?\.reduce_scatter: it is not available when the grader runs your "
        "reduce_scatter", result.message), result.message


@needs_sandbox
@pytest.mark.parametrize("code, wanted", [
    (None, None), (ZERO2_OWN_RING, None), (ZERO2_THROUGH_API, None),
    (ZERO2_DDP, "called allreduce.allreduce for n = 1 on 4 ranks: it must call "
                "allreduce.reduce_scatter on the gradients once"),
    (ZERO2_GATHERS_GRADIENTS, "rank 0's message 1 to rank 1 did not hold the data .*; a "
                              "ZeRO-2 step's reduce-scatter sends the gradients' partial sums"),
    (ZERO2_NO_ALLGATHER, r"rank 1, chunk 0 .* \(not updated: did the all-gather"),
    (ZERO2_LR_WRITTEN_IN, r"expected the weight less lr = [14] times"),
    (ZERO2_NO_UPDATE, r"rank 0, chunk 0 .* \(not updated: its own chunk, which it must"),
], ids=["the key", "its own ring, the same messages", "through allreduce.api", "DDP's allreduce",
        "an all-gather of the gradients", "no all-gather", "lr written in", "no update"])
def test_the_zero2_step_is_graded_on_what_its_phases_carry(root, code, wanted):
    """Lab 65's ZeRO-2 step (ungraded until 2026-11-27): a graded run's reduce_scatter and
    allgather are the ring's, whose messages the judge compares with the library's ring
    reduce-scatter of the gradients and all-gather of the updated weights."""
    result = _graded(_lab(root, "65_beyond_ring"), "zero2_step", code, stub=code is not None)
    if wanted is None:
        assert result.score == 1 and result.message.endswith("; and on 3 and 5 ranks"), \
            result.message
    else:
        assert result.score == 0 and re.search(wanted, result.message), result.message


def test_the_float32_hint_is_given_only_where_the_dtype_can_be_why():
    """The float32 case's failures say that the int64 cases passed, but not a time-out, a
    deadlock or a MemoryError, which the dtype did not cause (a hostile round's finding)."""
    from allreduce.lab import checks

    wrong = "reduce_scatter is wrong for n = 1001 on 4 ranks: rank 0, chunk 0"
    assert "[in float32, after the int64 cases were right" in checks.in_dtype(
        wrong, "reduce_scatter", "float32")
    assert checks.in_dtype(wrong, "reduce_scatter", "int64") == wrong
    assert "than `values`" in checks.in_dtype(wrong, "sparse_reduce_scatter", "float32")
    for other in ("x for n = 1001 on 8 ranks did not finish within 10 s: an endless loop",
                  "deadlock: rank 0 waits for rank 1", "x raised on rank 0: MemoryError: no",
                  "rank 3 ended without answering (killed: over its memory?)"):
        assert checks.in_dtype(other, "allreduce", "float32") == other


def test_the_float32_case_runs_where_float32_holds_the_secrets_exactly():
    """Up to 12 ranks the float32 case's sums are exact with at least 8 secret bits; from 13
    (a lab's check cell on more engines) the check keeps its int64 cases and leaves it out,
    where it raised on every engine (a review's finding); a wrong float that is no sum of
    the inputs is shown as it is, not truncated to a bit set."""
    from allreduce.lab import checks

    for size in range(1, 13):
        assert checks.cases("allreduce", size)[-1] == (1001, "float32")
        given, expected = checks.inputs("allreduce", 7, size, np.random.default_rng(size),
                                        "float32")
        total = np.zeros(7, np.float32)
        for mine in given:
            total += mine["buf"]
        assert np.array_equal(total, expected)  # every partial sum exact in float32
    assert checks.cases("allreduce", 13)[-1] == (1001, "int64")
    assert checks.described("allreduce", 13) == "n = 1, 3, 4, 7, 12, 1001"
    expected = np.full(4, 15, np.int64)
    wrong = checks.judge("allreduce", "f", 4, 0, 4, {"buf": np.full(4, 3.75, np.float32)},
                         expected)
    assert wrong.endswith("got 3.75"), wrong


STALLS_OFF_FOUR = """\
import time
if comm.size != 4:
    time.sleep(0.5)  # short of each case's limit, in every case off four ranks"""


@needs_sandbox
def test_an_exercise_s_runs_together_get_one_run_s_time(root):
    """A solution that stalls just short of the case's time limit in every case but on the
    labs' four ranks (a hostile round's): the exercise's runs on 3 and 5 ranks together
    may take only what the seven cases of one run could, not three times it."""
    key = _lab(root, "50_ring_allreduce")
    started = time.monotonic()
    result = _graded(key, "reduce_scatter", STALLS_OFF_FOUR, stub=False, timeout=1.0)
    # each case alone is within its limit: without the budget, full marks (a loaded machine
    # may still push one case past it, which fails the case instead)
    assert result.score == 0 and ("exercise's" in result.message
                                  or "did not finish" in result.message), result.message
    assert "on 4 ranks" not in result.message, result.message
    assert time.monotonic() - started < 7 + 5  # 7 cases of 1 s, and the sandboxes' start


def test_a_run_on_more_ranks_than_four_shares_four_ranks_memory(root, monkeypatch):
    """Recursive doubling is graded on 2, 4 and 8 ranks: the 8 sandboxes of the last run
    get half the memory each, so that a run (and --jobs runs side by side) takes no more of
    the machine than one of four ranks did."""
    from allreduce.grading import run, sandbox

    given, start = [], sandbox.Sandbox.start.__func__

    def watched(cls, fd, rank, plan, **options):
        given.append(options["limits"])
        return start(cls, fd, rank, plan, **options)

    monkeypatch.setattr(sandbox.Sandbox, "start", classmethod(watched))
    result = _graded(_lab(root, "40_tree_allreduce"), "recursive_doubling", sandboxed=False)
    assert result.score == 1, result.message
    four = sandbox.DEFAULT_LIMITS
    assert [limits.memory for limits in given] == [four.memory] * 6 + [four.memory // 2] * 8
    assert [limits.data for limits in given] == [four.data] * 6 + [four.data // 2] * 8


def _graded(key, exercise: str, code: str | None = None, *, stub: bool = True,
            timeout: float = 20, sandboxed: bool = True):
    """``exercise`` of the lab ``key`` graded with ``code`` as its solution's body (before
    the key's own solution, with ``stub=False``); the key's own without ``code``."""
    from allreduce.grading import run

    spec = grading.spec(key, exercise)
    submission = nbformat.from_dict(key)
    for cell in submission.cells:
        if code is not None and grading.role(cell) == (exercise, "solution"):
            cell.source = _body(_stub(cell.source, exercise) if stub else cell.source, code)
    return run.run_exercise(spec, grading.graded_code(key, submission, spec), timeout=timeout,
                            sandboxed=sandboxed)


def _lab(root, name: str):
    return nbformat.read(root / "labs" / f"{name}.ipynb", as_version=4)


def _graded_reduce_scatter(key, code: str, *, stub: bool = True, timeout: float = 20):
    """The ring lab's reduce_scatter exercise graded (sandboxed) with ``code``."""
    return _graded(key, "reduce_scatter", code, stub=stub, timeout=timeout)


HOARD = """\
p, rank = comm.size, comm.rank
held = [np.empty(600 << 7, np.int64) for _ in range(3)]  # 3 x 600 KiB
for chunk in held:  # every receive posted first, then every send: each matched at once
    comm.irecv(chunk, (rank - 1) % p)
comm.barrier()
for chunk in held:
    comm.isend(np.ones_like(chunk), (rank + 1) % p)  # and no wait, ever"""


@needs_sandbox
def test_a_run_that_never_waits_is_stopped_at_the_judges_cap(key, monkeypatch):
    """Real ranks post receives, then matching sends, and never wait: every message is
    matched the moment it arrives, so a cap that counted only unmatched sends let the judge
    hold all of them (100 x 8 MiB was 800 MiB).  A received message counts until its wait."""
    from allreduce.grading import matching

    monkeypatch.setattr(matching, "MAX_QUEUED", 1 << 20)  # 12 x 600 KiB are sent in all
    result = _graded_reduce_scatter(key, HOARD)
    assert result.score == 0
    assert "more than 1 MiB of messages were sent and not received" in result.message, \
        result.message


def test_a_result_made_by_hand_is_judged_not_raised():
    """What a rank returns is decoded from JSON, so it can be anything JSON holds: the sparse
    check read `.shape` of a list (AttributeError, which stopped the grading)."""
    import numpy as np

    from allreduce.grading import wire
    from allreduce.lab import checks

    expected = np.arange(1, 13)
    for got in ({"indices": [1, 2], "values": [3, 4]}, {"indices": {"a": [1]}, "values": None},
                {"indices": wire.Unreadable("function"), "values": {"x": 1}}, {"returned": 3}):
        problem = checks.judge("sparse_reduce_scatter", "f", 12, 0, 4, got, expected)
        assert problem and problem.startswith("f "), problem
    for got in ({"buf": [1, 2]}, {"buf": {"x": 1}, "returned": {"a": 1}}, {}):
        assert checks.judge("reduce_scatter", "f", 12, 0, 4, got, expected)


def test_an_exception_in_one_exercise_scores_it_0_and_the_others_run(root, tmp_path, key,
                                                                     monkeypatch, capsys):
    """Whatever raises while one exercise is graded, where nothing foresaw it (here the
    check's own inputs break: no submission can make that happen, so it is made to), and a
    notebook marked up by hand, give that exercise 0 with a message; the rest is graded.
    (The submissions that sent the grader malformed frames are in the ring lab's test.)"""
    import json

    from allreduce.grading import run

    real = run.checks.inputs

    def inputs(phase, *args):
        if phase == "reduce_scatter":
            raise ZeroDivisionError("a check that breaks")
        return real(phase, *args)

    monkeypatch.setattr(run.checks, "inputs", inputs)
    _variant(key, tmp_path, "a_correct", {})
    marked = json.loads((tmp_path / "a_correct.ipynb").read_text())
    marked["cells"][0]["metadata"]["allreduce"] = 5  # an "exercise" the grader cannot read
    (tmp_path / "b_marked_by_hand.ipynb").write_text(json.dumps(marked))
    marked["cells"][0]["source"] = 5
    (tmp_path / "c_source_not_text.ipynb").write_text(json.dumps(marked))
    graded = grading.grade(root / RING, sorted(tmp_path.glob("*.ipynb")), jobs=2,
                           sandboxed=False, progress=lambda *a, **k: None)
    for submission in graded[:2]:
        scatter, gather = submission.results["reduce_scatter"], submission.results["allgather"]
        assert scatter.score == 0 and "the grader could not judge reduce_scatter: " \
            "ZeroDivisionError: a check that breaks" in scatter.message, scatter.message
        assert gather.score == 1, gather.message
    assert all(r.score == 0 and "not a readable notebook" in r.message
               for r in graded[2].results.values())
    assert "ZeroDivisionError" in capsys.readouterr().err  # the traceback, for the instructor


# -- hostile submissions ------------------------------------------------------------------------

def _variant(key, folder: Path, name: str, edits: dict | None) -> None:
    nb = grading.student_copy(key) if edits is None else nbformat.from_dict(key)
    for cell in nb.cells:
        mark = grading.role(cell)
        if edits and mark and mark[1] == "solution" and mark[0] in edits:
            cell.source = edits[mark[0]](cell.source)
    nbformat.write(nb, folder / f"{name}.ipynb")


def _body(source: str, code: str) -> str:
    """``source`` (a solution cell) with ``code`` run first in its function."""
    head, _, rest = source.partition(":\n")
    indent = " " * 4
    return head + ":\n" + "".join(indent + line + "\n" for line in code.splitlines()) + rest


def _top(source: str, code: str) -> str:
    """``source`` with ``code`` at the top of the cell, after its ``%%px`` line."""
    first, _, rest = source.partition("\n")
    return f"{first}\n{code}{rest}" if first.startswith("%%px") else code + source


def _stub(source: str, exercise: str) -> str:
    return notebooks.stub_solutions(source, exercise)


MPI_ALLREDUCE = """\
from mpi4py import MPI
total = buf.copy()
MPI.COMM_WORLD.Allreduce(buf, total)
buf[:] = total
return chunk_bounds(len(buf), comm.size, comm.rank)"""

LIBRARY = """\
allreduce.allreduce(buf, comm, algorithm="ring", out=buf)
return chunk_bounds(len(buf), comm.size, comm.rank)"""

LIBRARY_RING = """\
from allreduce.algorithms import ring
return ring.taught_reduce_scatter(buf, comm, op)"""

FAKE_CHECK = """\
import allreduce.lab
def _passes(view, function, *args, **kwargs):
    print(f"{function}: correct on 4 ranks for n = 1, 3, 4, 7, 12, 1001")
allreduce.lab.check = _passes
"""

PATCH_CHECKER = """\
import allreduce.lab.checks, allreduce.lab.patterns
allreduce.lab.checks.judge = lambda *args, **kwargs: None
allreduce.lab.patterns.pattern_problem = lambda *args, **kwargs: None
allreduce.lab.patterns.compare = lambda *args, **kwargs: None
"""

READ_KEY = """\
import json, pathlib
import allreduce
root = pathlib.Path(allreduce.__file__).resolve().parents[2]
for path in [root / "labs" / "{lab}", root / "_build" / "html" / "_sources" / "labs" / "{lab}",
             pathlib.Path("{key}"), pathlib.Path.home() / "{lab}"]:
    try:
        nb = json.loads(path.read_text())
        break
    except OSError:
        continue
else:
    raise FileNotFoundError("the key is nowhere to be read")
source = next("".join(c["source"]) for c in nb["cells"]
              if c["metadata"].get("allreduce", {{}}).get("role") == "solution"
              and c["metadata"]["allreduce"]["exercise"] == "{exercise}")
space = dict(globals())
exec(source.replace("%%px --no-stream", ""), space)
return space["{exercise}"](buf, comm, op)"""

DETACH = f"""\
import subprocess, sys
subprocess.Popen([sys.executable, "-c", "import os, time; os.fork(); time.sleep(600)",
                  "{MARK}"], start_new_session=True, env={{}}, stdin=subprocess.DEVNULL,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)"""

WRITE_OUTSIDE = """\
import pathlib
for path in {paths}:
    try:
        pathlib.Path(path).write_text("vandalised")
    except OSError:
        pass
    try:
        pathlib.Path(path).unlink()
    except OSError:
        pass"""

FORK_BOMB = """\
import os
while True:
    os.fork()"""

HOG = """\
import numpy as np
hog = np.ones(30 * 2**30 // 8)  # 30 GiB"""

FLOOD = """\
import sys
if not hasattr(sys, "flooded"):  # once per rank: 200 MB of output, and a 256 MB file
    sys.flooded = True
    for _ in range(10):
        sys.stdout.write("x" * 10**7)
        sys.stderr.write("y" * 10**7)
    try:
        with open("flood.txt", "w") as f:
            for _ in range(256):
                f.write("z" * 2**20)
    except OSError:
        pass"""

# the grader's own objects in the rank, as a hostile submission finds them
RANK = """\
import gc
me = next(o for o in gc.get_objects() if type(o).__name__ == "Rank")
"""

MALFORMED_WAIT = RANK + """\
me.send({"op": "wait", "ids": [[1]]})
me.receive()"""

DEEP_HEADER = RANK + """\
import struct
me.sock.sendall(struct.pack("!I", 200000) + b"[" * 200000)
me.receive()"""

LIBRARY_RING_ANYHOW = """\
import gc, importlib.util, pathlib, sys, types
sys.setprofile(None)  # the watch on calls, off
tried = []
try:
    from allreduce.algorithms import ring
    return ring.taught_reduce_scatter(buf, comm, op)
except ImportError as error:
    tried.append(str(error))
path = pathlib.Path(chunk_bounds.__code__.co_filename).parent / "ring.py"
try:
    spec = importlib.util.spec_from_file_location("allreduce.algorithms.ring", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.taught_reduce_scatter(buf, comm, op)
except OSError as error:
    tried.append(str(error))
found = [o for o in gc.get_objects()  # the ring's function, anywhere in memory
         if isinstance(o, types.FunctionType) and o.__name__ == "taught_reduce_scatter"]
found += [o.taught_reduce_scatter for o in gc.get_objects()
          if isinstance(o, types.ModuleType) and hasattr(o, "taught_reduce_scatter")]
if found:
    return found[0](buf, comm, op)
raise RuntimeError("no ring: " + " | ".join(reversed(tried)))"""

NAIVE_WRONG_PATTERN = """\
p, rank, n = comm.size, comm.rank, len(buf)
others = np.empty((p, n), dtype=buf.dtype)
requests = []
for k in range(1, p):  # everyone's whole buffer to everyone: right sums, not a ring
    requests.append(comm.irecv(others[(rank - k) % p], (rank - k) % p))
    requests.append(comm.isend(buf, (rank + k) % p))
comm.waitall(requests)
for k in range(1, p):
    comm.reduce_local(op, buf, others[(rank - k) % p])
return chunk_bounds(n, p, rank)"""


def _grade(venv_bin, lab: Path, folder: Path, out: Path, *extra):
    run = subprocess.run([venv_bin / "allreduce-grade", lab, folder, "--out", out,
                          "--timeout", "20", "--jobs", "2", *extra],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    rows = list(csv_rows(out))
    return {row["student"]: row for row in rows}, run


def csv_rows(path: Path):
    import csv

    with path.open() as f:
        yield from csv.DictReader(f)


def _leftovers() -> str:
    """The processes a run of this test session left behind: any whose command line names
    this session's hostile mark, or the ranks' launcher under a process of this session
    (read from /proc: no pgrep, which may not be installed).  Another grading run on the
    same machine, whose launchers are not this session's, is not counted."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            argv = (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:  # it ended meanwhile
            continue
        line = " ".join(a for a in argv if a)
        if proc.name != str(os.getpid()) and (
                MARK in line or ("grading/confine.py" in line and _ours(proc))):
            found.append(f"{proc.name} {line[:200]}")
    return "\n".join(found)


def _ours(proc: Path) -> bool:
    """Whether ``proc`` or a process above it has this session's mark in its environment."""
    mark = f"ALLREDUCE_TEST_RUN={RUN}".encode()
    for _ in range(64):
        try:
            if mark in (proc / "environ").read_bytes().split(b"\0"):
                return True
            parent = int((proc / "stat").read_text().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            return False
        if parent <= 1:
            return False
        proc = Path("/proc") / str(parent)
    return False


@pytest.fixture
def home_file():
    """A file in the home folder for a vandal to aim at; removed however the test ends."""
    path = Path.home() / "allreduce-grading-canary.txt"
    path.write_text("canary")
    try:
        yield path
    finally:
        path.unlink(missing_ok=True)


def _digests(paths) -> dict:
    return {str(p): hashlib.sha256(Path(p).read_bytes()).hexdigest() if Path(p).exists()
            else None for p in paths}


@needs_sandbox
def test_hostile_submissions_on_the_ring_lab(root, venv_bin, tmp_path, key, home_file):
    lab = tmp_path / "key.ipynb"  # a copy, so that the vandals below can aim at its path
    shutil.copy(root / RING, lab)
    digest = hashlib.sha256(lab.read_bytes()).hexdigest()
    folder = tmp_path / "submissions"
    folder.mkdir()
    out = tmp_path / "scores.csv"
    rs, ag = "reduce_scatter", "allgather"
    _variant(key, folder, "a_correct", {})
    _variant(key, folder, "b_off_by_one", {rs: lambda s: s.replace(
        "(rank - step - 2) % p", "(rank - step - 1) % p")})
    _variant(key, folder, "c_deadlock", {ag: lambda s: s.replace(
        "comm.sendrecv(buf[send_lo:send_hi], right, buf[recv_lo:recv_hi], left)",
        "comm.recv(buf[recv_lo:recv_hi], left)\n        comm.send(buf[send_lo:send_hi], right)")})
    _variant(key, folder, "d_kills_itself", {rs: lambda s: _body(
        _stub(s, rs), "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)")})
    _variant(key, folder, "e_untouched_student_copy", None)
    _variant(key, folder, "f_calls_mpi_allreduce", {rs: lambda s: _body(_stub(s, rs), MPI_ALLREDUCE)})
    _variant(key, folder, "g_calls_the_library", {rs: lambda s: _body(_stub(s, rs), LIBRARY),
                                                  ag: lambda s: _body(_stub(s, ag),
                                                  "from allreduce.algorithms import ring\n"
                                                  "return ring.allgather(buf, comm)")})
    _variant(key, folder, "h_library_ring_exact_pattern", {rs: lambda s: _body(_stub(s, rs), LIBRARY_RING)})
    _variant(key, folder, "i_fakes_the_check", {rs: lambda s: _top(_stub(s, rs), FAKE_CHECK),
                                                ag: lambda s: _top(_stub(s, ag), FAKE_CHECK)})
    _variant(key, folder, "j_patches_the_checker", {rs: lambda s: _top(_body(
        _stub(s, rs), "return chunk_bounds(len(buf), comm.size, comm.rank)"), PATCH_CHECKER)})
    _variant(key, folder, "k_reads_the_key", {rs: lambda s: _body(_stub(s, rs), READ_KEY.format(
        lab="50_ring_allreduce.ipynb", key=lab, exercise=rs))})
    _variant(key, folder, "l_leaves_a_detached_process", {rs: lambda s: _body(s, DETACH)})
    targets = [str(lab), str(out), str(home_file), str(folder / "a_correct.ipynb"),
               str(root / "README.md"), "/etc/hostname", str(Path.home() / "new-file")]
    _variant(key, folder, "m_writes_outside", {rs: lambda s: _body(s, WRITE_OUTSIDE.format(
        paths=targets))})
    untouched = [t for t in targets if t != str(out)]  # the grader writes the scores, later
    targets_before = _digests(untouched)
    _variant(key, folder, "n_fork_bomb", {rs: lambda s: _body(_stub(s, rs), FORK_BOMB)})
    _variant(key, folder, "o_allocates_30_gib", {rs: lambda s: _body(_stub(s, rs), HOG)})
    _variant(key, folder, "p_floods_its_output", {ag: lambda s: _body(s, FLOOD)})
    _variant(key, folder, "q_right_values_wrong_pattern", {rs: lambda s: _body(
        _stub(s, rs), NAIVE_WRONG_PATTERN)})
    _variant(key, folder, "r_waits_for_malformed_ids", {rs: lambda s: _body(
        _stub(s, rs), MALFORMED_WAIT)})
    _variant(key, folder, "s_sends_a_deep_header", {rs: lambda s: _body(
        _stub(s, rs), DEEP_HEADER)})
    _variant(key, folder, "t_reaches_for_the_library_ring", {rs: lambda s: _body(
        _stub(s, rs), LIBRARY_RING_ANYHOW)})
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    started = time.monotonic()
    rows, run = _grade(venv_bin, lab, folder, out)
    seconds = time.monotonic() - started

    def scores(name):
        return rows[name][rs], rows[name][ag]

    def says(name, *texts):
        for text in texts:
            assert re.search(text, rows[name]["messages"]), (name, rows[name]["messages"])

    assert scores("a_correct") == ("3", "2") and rows["a_correct"]["percent"] == "100"
    assert scores("b_off_by_one") == ("0", "2")
    says("b_off_by_one", r"reduce_scatter for n = \d+ on 4 ranks: rank \d sent \d+ int64 elements? to rank",
         "sender and receiver disagree on the chunk")
    assert scores("c_deadlock") == ("3", "0")
    says("c_deadlock", "deadlock: rank 0 waits for a message from rank 3")
    assert scores("d_kills_itself") == ("0", "2")
    says("d_kills_itself", "process ended without answering")
    assert scores("e_untouched_student_copy") == ("0", "0")
    says("e_untouched_student_copy", "NotImplementedError: exercise reduce_scatter",
         "NotImplementedError: exercise allgather")
    assert scores("f_calls_mpi_allreduce")[0] == "0"
    says("f_calls_mpi_allreduce", "mpi4py is not available .* only through the comm")
    assert scores("g_calls_the_library") == ("0", "0")
    says("g_calls_the_library", "called allreduce.allreduce",
         "allreduce.algorithms.ring is not available when the grader runs your allgather")
    assert scores("h_library_ring_exact_pattern")[0] == "0"
    says("h_library_ring_exact_pattern",
         "allreduce.algorithms.ring is not available when the grader runs your reduce_scatter")
    assert scores("i_fakes_the_check") == ("0", "0")
    says("i_fakes_the_check", "NotImplementedError")
    assert scores("j_patches_the_checker")[0] == "0"
    says("j_patches_the_checker", "reduce_scatter is wrong for n = 1 on 4 ranks: rank 0")
    assert scores("k_reads_the_key")[0] == "0"
    says("k_reads_the_key", "the key is nowhere to be read")
    assert scores("l_leaves_a_detached_process") == ("3", "2")  # only the side effect was hostile
    assert scores("m_writes_outside") == ("3", "2")
    assert scores("n_fork_bomb")[0] == "0"
    says("n_fork_bomb", "Resource temporarily unavailable|ended without answering")
    assert scores("o_allocates_30_gib")[0] == "0"
    says("o_allocates_30_gib", "MemoryError")
    assert scores("p_floods_its_output") == ("3", "2")
    assert scores("q_right_values_wrong_pattern")[0] == "0"
    says("q_right_values_wrong_pattern",
         "reduce_scatter on rank 0 sent 3 messages .* to ranks 1, 2, 3 .*; the ring reduce-scatter "
         "sent .*; it must pass chunks around the ring")
    # malformed frames from the grader's own objects: that exercise scores 0, the rest runs
    assert scores("r_waits_for_malformed_ids") == ("0", "2")
    says("r_waits_for_malformed_ids", "rank 0 waited for a request it never made")
    assert scores("s_sends_a_deep_header") == ("0", "2")
    says("s_sends_a_deep_header", "broke the grader's protocol: a malformed header")
    # the library's algorithms are not in a run: not importable, not on disk, not in memory
    assert scores("t_reaches_for_the_library_ring")[0] == "0"
    says("t_reaches_for_the_library_ring", "no ring: .*No such file or directory",
         "allreduce.algorithms.ring is not available when the grader runs your reduce_scatter")
    # nothing outside the runs changed, and nothing of them is left
    assert hashlib.sha256(lab.read_bytes()).hexdigest() == digest
    assert "changed while grading" not in run.stdout
    assert home_file.read_text() == "canary" and not (Path.home() / "new-file").exists()
    assert _digests(untouched) == targets_before  # the key, home, README, /etc/hostname
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    assert not _leftovers(), _leftovers()
    # the reports: feedback per student (with the failing cell), Gradescope, similarity
    feedback = (tmp_path / "scores-feedback" / "b_off_by_one.md").read_text()
    assert "**2 of 5 points (40%).**" in feedback and "(rank - step - 1) % p" in feedback
    results = json.loads((tmp_path / "scores-feedback" / "b_off_by_one.results.json").read_text())
    assert results["score"] == 2 and [t["max_score"] for t in results["tests"]] == [3, 2]
    similar = list(csv_rows(tmp_path / "scores-similarity.csv"))
    assert any({r["submission_a"], r["submission_b"]} == {"a_correct", "m_writes_outside"}
               for r in similar if r["exercise"] == "allgather")
    print(f"graded {len(before)} submissions x 2 exercises in {seconds:.0f} s")


@needs_sandbox
def test_hostile_submissions_on_the_naive_lab(root, venv_bin, tmp_path):
    lab = root / NAIVE
    key = nbformat.read(lab, as_version=4)
    folder = tmp_path / "submissions"
    folder.mkdir()
    na, rb = "naive_allreduce", "reduce_then_broadcast"
    _variant(key, folder, "a_correct", {})
    _variant(key, folder, "b_mpi", {na: lambda s: _body(_stub(s, na), "world.Allreduce(buf.copy(), buf)\nreturn")})
    _variant(key, folder, "c_library", {na: lambda s: _body(_stub(s, na),
                                        "allreduce.allreduce(buf, comm, algorithm='naive', out=buf)\n"
                                        "return"),
                                        rb: lambda s: _body(_stub(s, rb),
                                        "allreduce.algorithms.reduce_broadcast.reduce_broadcast(buf, comm, op)\n"
                                        "return")})
    _variant(key, folder, "d_fakes_the_check", {na: lambda s: _top(_stub(s, na), FAKE_CHECK)})
    _variant(key, folder, "e_reads_the_key", {na: lambda s: _body(_stub(s, na), READ_KEY.format(
        lab="30_naive_allreduce.ipynb", key=lab, exercise=na))})
    _variant(key, folder, "f_fork_bomb", {rb: lambda s: _body(_stub(s, rb), FORK_BOMB)})
    _variant(key, folder, "g_allocates_30_gib", {rb: lambda s: _body(_stub(s, rb), HOG)})
    _variant(key, folder, "h_detached", {na: lambda s: _body(s, DETACH)})
    _variant(key, folder, "i_ring_instead_of_naive", {na: lambda s: _body(_stub(s, na),
             "from allreduce.lab.patterns import _reference_function\n"
             "_reference_function('ring_reduce_scatter')(buf, comm, op)\n"
             "_reference_function('ring_allgather')(buf, comm, op)\nreturn")})
    rows, _ = _grade(venv_bin, lab, folder, tmp_path / "scores.csv")
    assert (rows["a_correct"][na], rows["a_correct"][rb]) == ("2", "3")
    for name in ("b_mpi", "c_library", "d_fakes_the_check", "e_reads_the_key"):
        assert rows[name][na] == "0", (name, rows[name]["messages"])
    assert re.search("`world` is a global of the lab notebook", rows["b_mpi"]["messages"])
    assert "called allreduce.allreduce" in rows["c_library"]["messages"]
    assert rows["c_library"][rb] == "0"
    assert "FileNotFoundError" in rows["e_reads_the_key"]["messages"]
    assert rows["f_fork_bomb"][rb] == "0" and rows["g_allocates_30_gib"][rb] == "0"
    assert "MemoryError" in rows["g_allocates_30_gib"]["messages"]
    assert rows["h_detached"][na] == "2"
    assert rows["i_ring_instead_of_naive"][na] == "0"
    assert "library's" in rows["i_ring_instead_of_naive"]["messages"]
    assert not _leftovers(), _leftovers()


# -- what a run has of the library -------------------------------------------------------------

def test_a_run_gets_no_algorithm_and_no_reference_of_its_check():
    """The plan of every kind of run: no algorithm module (but the ring, for the one pattern
    made of the library's phases, which its stand-ins offer and no other run's do), no
    package __init__ that would import them, and each kernel check's reference absent or
    removed."""
    from allreduce.grading import confine
    from allreduce.lab import LOCAL_CHECKS

    plans = {f"ranks {pattern}": confine.plan("ranks", pattern=pattern) for pattern in PATTERNS}
    plans |= {"overlap": confine.plan("overlap")}
    plans |= {name: confine.plan("local", name) for name in LOCAL_CHECKS}
    for name, plan in plans.items():
        files = set(plan.files)
        ring = {"algorithms/ring.py"} if name == "ranks zero2" else set()
        assert plan.phases == (("reduce_scatter", "allgather") if ring else ()), name
        assert not ({f for f in files if f.startswith(("algorithms/", "sparse/", "transports/"))}
                    - {"algorithms/_schedule.py", "sparse/vector.py", "transports/__init__.py"}
                    - ring), name
        assert ring <= files, name
        assert not files & {"__init__.py", "api.py", "validation.py", "algorithms/__init__.py",
                            "sparse/__init__.py", "lab/__init__.py", "ddp_hook.py",
                            "sparse/sparse_ring.py", "algorithms/auto.py"}, name
        assert all(os.path.isfile(os.path.join(confine.LIBRARY, f)) for f in files), name
    for name, check in LOCAL_CHECKS.items():
        plan = plans[name]
        for reference in check.reference:
            module = reference if reference not in plan.removed else reference.rpartition(".")[0]
            assert reference in plan.removed or module not in plan.modules, (name, reference)
    assert "training.py" in plans["overlap"].files
    assert plans["overlap"].removed == ("allreduce.training.attach_hooks",)
    assert "sparse/vector.py" not in plans["check_merge"].files


#: For each kernel check: a solution that hands the work to the check's own reference,
#: and what the grader says of it.
KERNEL_CHEATS = {
    "check_fit": ("fit_alpha_beta", "sizes, seconds", """\
from allreduce import cost
m = cost.fit([cost.Terms(1, n, 0) for n in sizes], seconds, gamma=False)
return m.alpha, m.beta""", "allreduce.cost is not available"),
    "check_choice": ("choose_algorithm", "model, p, nbytes", """\
from allreduce.algorithms.auto import fastest
return fastest(nbytes, p, model)""", "allreduce.algorithms.auto is not available"),
    "check_crossover": ("doubling_crossover", "model, p", """\
import sys
cost = sys.modules[type(model).__module__]
return cost.crossover(model, "recursive_doubling", "rabenseifner", p)""",
                        ("`allreduce.cost.crossover` is what the check compares your "
                         "doubling_crossover with")),
    "check_busbw": ("busbw", "nbytes, seconds, p", """\
from allreduce.cost import busbw as theirs
return theirs(nbytes, seconds, p)""", "allreduce.cost is not available"),
    "check_ddp_buckets": ("ddp_buckets", "sizes, cap", """\
from allreduce.ddp_buckets import ddp_buckets as theirs
return theirs(sizes, cap)""", "allreduce.ddp_buckets is not available"),
    "check_merge": ("merge_two", "ia, va, ib, vb", """\
from allreduce.sparse.vector import merge
return merge([(ia, va), (ib, vb)], va.dtype)""", "allreduce.sparse.vector is not available"),
    "check_error_feedback": ("compress_with_feedback", "gradient, residual, k", """\
from allreduce.sparse.compression import topk
corrected = gradient + residual
indices, values = topk(corrected, k)
corrected[indices] = 0
return indices, values, corrected""", "allreduce.sparse.compression is not available"),
    "check_torus_cost": ("torus_cost", "p, n", """\
from allreduce import cost
terms = cost.terms("torus", p, n)
return terms.steps, terms.bytes""", "allreduce.cost is not available"),
}


def _cheat(check: str) -> str:
    function, arguments, body, _ = KERNEL_CHEATS[check]
    return f"def {function}({arguments}):\n" + "".join(f"    {line}\n" for line in body.splitlines())


@needs_sandbox
def test_kernel_exercises_cannot_call_the_checks_reference():
    """Each kernel check's reference (ddp_buckets, the sparse merge, Top-k, busbw, the fit,
    the crossover, auto's choice) scored 100% when a solution called it: now it is not in
    the run (or, beside a model the function needs, replaced by a stand-in)."""
    from allreduce.grading.run import Code, run_exercise
    from allreduce.grading.notebooks import Spec
    from allreduce.lab import LOCAL_CHECKS

    assert set(KERNEL_CHEATS) == set(LOCAL_CHECKS)
    setup = "import math\nimport numpy as np\nfrom allreduce import cost, lab, viz"
    for check, (function, _, _, says) in KERNEL_CHEATS.items():
        spec = Spec(function, "local", function, check=check, engines=False)
        result = run_exercise(spec, Code(setup, ("view",), (_cheat(check),)), timeout=20)
        assert result.score == 0 and says in result.message, (check, result.message)
        assert f"{function} raised for the arguments" in result.message


def test_the_check_cells_watch_for_the_reference_in_the_kernel(capsys):
    """In the lab's own check cell (the notebook's kernel, with the whole library), a call
    into the check's reference is caught as the engines' checks catch the library's ring."""
    from allreduce.lab import LOCAL_CHECKS

    for check, (function, _, _, _) in KERNEL_CHEATS.items():
        space: dict = {}
        exec(_cheat(check), space)  # noqa: S102
        with pytest.raises(AssertionError, match=f"your {function} called the library's .* which "
                           "is what the check compares it with"):
            LOCAL_CHECKS[check](space[function])
    honest = {}
    exec("def doubling_crossover(model, p):\n"  # noqa: S102
         "    import math\n    lg = math.log2(p)\n"
         "    a, b = lg * (model.beta + model.gamma), (p - 1) / p * (2 * model.beta + model.gamma)\n"
         "    return None if a <= b else lg * model.alpha / (a - b)\n"
         "def choose_algorithm(model, p, nbytes):\n"
         "    return min(('recursive_doubling', 'rabenseifner', 'ring'),\n"
         "               key=lambda name: model.time(name, p, nbytes))\n", honest)
    LOCAL_CHECKS["check_crossover"](honest["doubling_crossover"])
    LOCAL_CHECKS["check_choice"](honest["choose_algorithm"])
    assert "doubling_crossover: agrees" in capsys.readouterr().out


def test_a_table_of_the_shown_cases_answers_fails_the_graded_cases():
    """A kernel exercise's shown cases can be answered from a table made with the library
    beforehand (a hostile reader's submission scored 100% on the fit, busbw and DDP's
    buckets so): the grader adds cases drawn from its secret seed.  The honest function
    passes them; the table fails them."""
    import numpy as np

    from allreduce.lab import LOCAL_CHECKS
    from allreduce.lab.local import _plain

    for check_name, check in LOCAL_CHECKS.items():
        space: dict = {}
        exec(_cheat(check_name), space)  # noqa: S102 - the library's answer: honest here
        honest = space[KERNEL_CHEATS[check_name][0]]
        given = check.given()
        table = {json.dumps(case): _plain(check.call(honest, case, given))
                 for case in check.cases()}
        for seed in (20261126, 7, 12345):  # the grader's is a 64-bit digest (not 0, 5 or 6,
            graded = check.graded_cases(np.random.default_rng(seed))  # the shown cases' own)
            assert len(graded) > len(check.cases()), check_name
            right = [_plain(check.call(honest, case, given)) for case in graded]
            check.verdict(graded, right)  # the drawn cases are well formed and passable
            looked_up = [table.get(json.dumps(case)) for case in graded]
            check.verdict(check.cases(), looked_up[:len(check.cases())])  # the shown pass
            with pytest.raises(AssertionError):
                check.verdict(graded, looked_up)


ZEROS_AROUND_THE_RING = """\
p, rank, n = comm.size, comm.rank, len(buf)
scratch = np.zeros(-(-n // p), dtype=buf.dtype)
for step in range(p - 1):  # the ring's messages, with nothing in them
    s_lo, s_hi = chunk_bounds(n, p, (rank - step - 1) % p)
    r_lo, r_hi = chunk_bounds(n, p, (rank - step - 2) % p)
    comm.sendrecv(np.zeros(s_hi - s_lo, buf.dtype), (rank + 1) % p, scratch[: r_hi - r_lo],
                  (rank - 1) % p)
"""

SIDE_CHANNEL = ZEROS_AROUND_THE_RING + """\
import os, socket, time
theirs = {rank: buf.copy()}  # the data, through the sandbox instead
for folder in ("/tmp", "/dev/shm", "/run/grade"):
    np.save(f"{folder}/side-{n}-{rank}.tmp.npy", buf)
    os.rename(f"{folder}/side-{n}-{rank}.tmp.npy", f"{folder}/side-{n}-{rank}.npy")
udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
udp.bind(("127.0.0.1", 42000 + rank))
udp.setblocking(False)
deadline = time.monotonic() + 3
while len(theirs) < p and time.monotonic() < deadline:
    for r in range(p):
        udp.sendto(rank.to_bytes(1, "big") + buf.tobytes(), ("127.0.0.1", 42000 + r))
        for folder in ("/tmp", "/dev/shm", "/run/grade"):
            if os.path.exists(f"{folder}/side-{n}-{r}.npy"):
                theirs[r] = np.load(f"{folder}/side-{n}-{r}.npy")
    try:
        packet = udp.recv(65536)
        theirs[packet[0]] = np.frombuffer(packet[1:], dtype=buf.dtype)
    except BlockingIOError:
        time.sleep(0.01)
lo, hi = chunk_bounds(n, p, rank)
if len(theirs) == p:
    buf[lo:hi] = sum(theirs.values())[lo:hi]
return lo, hi"""


@needs_sandbox
def test_no_rank_reaches_another_except_through_the_judge(root, key, monkeypatch):
    """The ring's pattern with empty messages, and the data through /tmp, /dev/shm, the run
    folder or loopback UDP: with the four ranks in one sandbox it scored 100%.  Each rank has
    its own sandbox now (and, as root, its own user id), so none of those reach another."""
    from allreduce.grading import run

    started = []
    real = run.Sandbox.start

    def start(*args, **kwargs):
        started.append(real(*args, **kwargs))
        return started[-1]

    monkeypatch.setattr(run.Sandbox, "start", start)
    result = _graded_reduce_scatter(key, SIDE_CHANNEL)
    assert result.score == 0, result.message
    assert re.search("reduce_scatter is wrong for n = 1 on 4 ranks: rank 0, chunk 0 .*"
                     r"expected the data of all 4 ranks, got the data of rank 0(?![+\d])",  # its own only
                     result.message), result.message
    assert len(started) == 4
    if os.geteuid() == 0:
        assert len({s.uid for s in started}) == 4 and None not in {s.uid for s in started}


def test_without_a_sandbox_the_grading_tests_skip_loudly_or_fail_when_required(venv_bin,
                                                                               tmp_path):
    """Where no sandbox starts (here: ALLREDUCE_BWRAP names no program), the grading tests
    skip and the run ends with a banner; with ALLREDUCE_REQUIRE_SANDBOX=1 (as .ci/run sets)
    they fail."""
    from conftest import child_env

    def pytest_run(**extra):
        env = dict(child_env(), ALLREDUCE_BWRAP=str(tmp_path / "no-bwrap"))
        env.pop("ALLREDUCE_REQUIRE_SANDBOX", None)  # .ci/run sets it for the whole run
        env.update(extra)
        return subprocess.run([venv_bin / "python", "-m", "pytest", __file__, "-q", "-p",
                               "no:cacheprovider", "-k", "self_mode"], capture_output=True,
                              text=True, timeout=120, env=env, check=False)

    skipped = pytest_run()
    assert skipped.returncode == 0 and "1 skipped" in skipped.stdout, skipped.stdout
    assert "GRADING TESTS DID NOT RUN: NO SANDBOX" in skipped.stdout
    assert "bwrap did not run" in skipped.stdout
    failed = pytest_run(ALLREDUCE_REQUIRE_SANDBOX="1")
    assert failed.returncode == 1 and "1 error" in failed.stdout, failed.stdout
    assert "ALLREDUCE_REQUIRE_SANDBOX=1, but no sandbox starts here" in failed.stdout


# -- every lab: the key scores 100%, an untouched copy 0 -------------------------------------------

@needs_sandbox
@pytest.mark.parametrize("name", LABS)
def test_the_keys_solutions_score_everything_and_a_student_copy_nothing(root, tmp_path, name):
    lab = root / "labs" / name
    key = nbformat.read(lab, as_version=4)
    folder = tmp_path / "submissions"
    folder.mkdir()
    completed = grading.student_copy(key)  # the student copy, completed with the key's code
    solutions = iter(c.source for c in key.cells if (grading.role(c) or ("", ""))[1] == "solution")
    for cell in completed.cells:
        if (grading.role(cell) or ("", ""))[1] == "solution":
            cell.source = next(solutions)
    nbformat.write(completed, folder / "completed.ipynb")
    nbformat.write(grading.student_copy(key), folder / "student.ipynb")
    graded = grading.grade(lab, sorted(folder.iterdir()), jobs=2, progress=lambda *a, **k: None)
    done, untouched = graded
    assert done.total == 1.0, {e: r.message for e, r in done.results.items()}
    assert list(untouched.results) == grading.exercises(key)
    for exercise, result in untouched.results.items():
        assert result.score == 0.0
        assert f"NotImplementedError: exercise {exercise}" in result.message, result.message


# -- the grader itself ----------------------------------------------------------------------------

@needs_sandbox
@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["Ctrl-C", "SIGTERM"])
def test_interrupting_a_parallel_grading_ends_its_runs(root, venv_bin, tmp_path, key, stop):
    """Ctrl-C (or SIGTERM: a killed job) on `allreduce-grade --jobs 2` while both runs
    hang: the grader exits within a second or two (it took 46 s against a rank that stalled
    the judge) and leaves nothing behind, no process and no cgroup (SIGTERM once left the
    cgroups)."""
    folder = tmp_path / "submissions"
    folder.mkdir()
    hang = {"reduce_scatter": lambda s: _body(s, "import time\ntime.sleep(600)")}
    _variant(key, folder, "a_hangs", hang)
    _variant(key, folder, "b_hangs", hang)
    # Ctrl-C at a terminal, where the grader gets SIGINT with its default disposition; a test
    # run started in the background by a non-interactive shell (`make test &`) inherits
    # SIGINT ignored, and Python then installs no KeyboardInterrupt handler: restore it
    grader = subprocess.Popen([venv_bin / "allreduce-grade", root / RING, folder, "--out",
                               tmp_path / "scores.csv", "--jobs", "2"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    time.sleep(8)  # both runs are now in the sleeping call
    assert grader.poll() is None, grader.communicate()
    interrupted = time.monotonic()
    os.kill(grader.pid, stop)
    out, err = grader.communicate(timeout=60)
    # a line that says so, no traceback, and the exit status a shell gives a stopped job
    assert grader.returncode == 130 and "allreduce-grade: interrupted before any student" in err \
        and "Traceback" not in err, (grader.returncode, out, err)
    # the judges look at Ctrl-C every 0.2 s; the rest is ending the sandboxes and Python
    assert time.monotonic() - interrupted < 3, "the grader waited for its runs"
    time.sleep(1)
    assert not _leftovers(), _leftovers()
    groups = [str(g) for g in Path("/sys/fs/cgroup").glob(f"**/allreduce-grade-{grader.pid}-*")]
    assert not groups, groups


def test_a_file_that_is_not_a_notebook_scores_zero_with_the_reason(root, tmp_path):
    (tmp_path / "garbage.ipynb").write_text("not json")
    (graded,) = grading.grade(root / RING, [tmp_path / "garbage.ipynb"], jobs=2,
                              progress=lambda *a, **k: None)
    assert list(graded.results) == ["reduce_scatter", "allgather"]
    for result in graded.results.values():
        assert result.score == 0 and result.message.startswith("not a readable notebook")


def test_the_bwrap_used_is_the_instructors_then_the_systems_then_the_wheels(monkeypatch,
                                                                             tmp_path):
    """An AppArmor profile on Ubuntu names the system's /usr/bin/bwrap, not the wheel's copy
    under .venv: the system's comes first, and ALLREDUCE_BWRAP before both."""
    from allreduce.grading import sandbox

    monkeypatch.delenv("ALLREDUCE_BWRAP", raising=False)
    system = tmp_path / "bwrap"
    system.write_text("#!/bin/sh\n")
    system.chmod(0o755)
    monkeypatch.setattr(sandbox, "SYSTEM_BWRAP", system)
    assert sandbox.bwrap() == system
    monkeypatch.setattr(sandbox, "SYSTEM_BWRAP", tmp_path / "none")
    assert sandbox.bwrap() is not None and sandbox.bwrap().name == "bwrap"
    monkeypatch.setenv("ALLREDUCE_BWRAP", "/opt/bubblewrap/bwrap")
    assert sandbox.bwrap() == Path("/opt/bubblewrap/bwrap")


def test_grading_refuses_without_a_sandbox_unless_told(root, tmp_path, key, monkeypatch, capsys):
    from allreduce.grading import cli

    folder = tmp_path / "submissions"
    folder.mkdir()
    _variant(key, folder, "a_correct", {})
    monkeypatch.setattr(cli, "probe", lambda: "setting up uid map: Permission denied")
    out = tmp_path / "scores.csv"
    assert cli.grade_main([str(root / RING), str(folder), "--out", str(out)]) == 2
    said = capsys.readouterr().err
    assert "cannot start here (setting up uid map" in said and "--no-sandbox" in said
    assert not out.exists()
    assert cli.grade_main([str(root / RING), str(folder), "--out", str(out), "--no-sandbox",
                           "--format", "canvas"]) == 0
    rows = out.read_text().splitlines()
    assert rows[0].startswith("Student,ID,SIS User ID,SIS Login ID,Section,")
    assert rows[1].endswith(",5") and rows[2] == "a_correct,,,a_correct,,5"


@needs_sandbox
def test_self_mode_checks_a_students_own_notebook(root, venv_bin, tmp_path, key):
    _variant(key, tmp_path, "mine", {"allgather": lambda s: _stub(s, "allgather")})
    run = subprocess.run([venv_bin / "allreduce-grade", "--self", tmp_path / "mine.ipynb"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "**3 of 5 points (60%).**" in run.stdout
    assert "NotImplementedError: exercise allgather" in run.stdout
    assert "# Feedback: mine on mine.ipynb" in run.stdout  # for a terminal: no Markdown escapes
    assert "\\_" not in run.stdout


def test_a_checkout_under_tmp_is_bound_over_the_private_tmp(monkeypatch):
    """The sandbox's private /tmp is mounted before the interpreter, the environment and the
    library are bound, so a checkout under /tmp (a fresh clone in a mktemp folder) is still
    there inside; bound after them, the empty /tmp hid it and no rank started.  (A real
    grading run from a clone under /tmp is what ``make test`` in such a clone does.)"""
    import itertools

    from allreduce.grading import confine, sandbox
    from allreduce.grading.sandbox import DEFAULT_LIMITS, command

    real = sandbox._read_only_paths()
    monkeypatch.setattr(sandbox, "_read_only_paths", lambda: [*real, Path("/tmp/clone/.venv")])
    args = command(["true"], as_root=True, limits=DEFAULT_LIMITS,
                   plan=confine.plan("ranks"))
    tmp = next(i for i, pair in enumerate(itertools.pairwise(args))
               if pair == ("--tmpfs", "/tmp"))
    binds = [i for i, a in enumerate(args) if a in ("--ro-bind", "--bind", "--dir", "--tmpfs")
             and i + 1 < len(args) and args[i + 1] != "/tmp"
             and Path(args[i + 1]).is_relative_to("/tmp")]
    assert binds and all(i > tmp for i in binds), "a mount under /tmp precedes the private /tmp"


# -- issue 25: no side channel, every limit real, every case bounded ------------------------------

SYSCALLS = """\
import ctypes, json, subprocess, sys, threading
libc = ctypes.CDLL(None, use_errno=True)
def call(nr, *args):
    result = libc.syscall(ctypes.c_long(nr), *(ctypes.c_long(a) for a in args))
    return 0 if result >= 0 else ctypes.get_errno()
names = json.loads(sys.argv[1])
lock = ctypes.create_string_buffer(32)
shared = open("/usr/bin/env", "rb")  # a file of the read-only /usr every sandbox shares
found = {name: call(nr) for name, nr in names.items()}
found |= {f"fcntl {cmd}": call(72, shared.fileno(), cmd, ctypes.addressof(lock))
          for cmd in json.loads(sys.argv[2])}
found["flock on /usr"] = call(73, shared.fileno(), 2 | 4)  # LOCK_EX | LOCK_NB
found["clone3"] = call(435, 0, 0)
found["clone CLONE_NEWUSER"] = call(56, 0x10000000 | 17, 0, 0, 0, 0)
found["fcntl F_GETFL"] = call(72, shared.fileno(), 3)  # not a lock: allowed
libc.mmap.restype = ctypes.c_void_p  # /usr/bin/env mapped: the same pages in every sandbox
mapped = libc.mmap(None, 4096, 1, 1, shared.fileno(), 0)  # PROT_READ, MAP_SHARED
found["futex shared"] = call(202, mapped, 1, 1)  # FUTEX_WAKE, keyed by the file
found["futex private"] = call(202, ctypes.addressof(lock), 1 | 128, 1)  # allowed
found["futex_wake"] = call(454, mapped, 1, 1, 2)  # futex2, FUTEX2_SIZE_U32
found["futex_waitv"] = call(449, 0, 0, 0, 0, 0)
found["futex shared wait"] = call(202, mapped, 0, 12345, 0)  # returns at once: no waiting
found["futex shared requeue"] = call(202, mapped, 3, 1, 1, mapped, 0)  # FUTEX_CMP_REQUEUE
libc.pthread_create.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                ctypes.c_void_p]
tid = ctypes.c_ulong()  # a C thread that sleeps a second, joined while it runs: glibc's
libc.pthread_create(ctypes.byref(tid), None, ctypes.cast(libc.sleep, ctypes.c_void_p), 1)
found["pthread_join"] = libc.pthread_join(tid, None)  # shared futex wait (aborted on EPERM)
import numpy as np
found["numpy"] = int(np.arange(10).sum())
thread = threading.Thread(target=lambda: None)
thread.start()
thread.join()
found["a subprocess"] = subprocess.run(["/bin/true"]).returncode  # clone3, then clone
import os
for path in ("/dev/ptmx", "/proc/sys/kernel/pty/nr", "/proc/sys/fs/file-nr"):
    try:
        os.close(os.open(path, os.O_RDWR if path == "/dev/ptmx" else os.O_RDONLY))
        found[path] = 0
    except OSError as error:
        found[path] = error.errno
print(json.dumps(found))"""


def _in_a_sandbox(script: str, *argv: str) -> dict:
    """``script`` run by the sandbox's interpreter in a rank's sandbox (the command line,
    syscall filter included, that grading uses); what it printed, as JSON."""
    import sys

    from allreduce.grading import confine, sandbox

    fd = sandbox.syscall_filter()
    args = sandbox.command([sys.executable, "-I", "-c", script, *argv], as_root=os.geteuid() == 0,
                           limits=sandbox.DEFAULT_LIMITS, plan=confine.plan("ranks"),
                           filter_fd=fd)
    try:
        run = subprocess.run(args, capture_output=True, text=True, timeout=60,
                             pass_fds=[] if fd is None else [fd])
    finally:
        if fd is not None:
            os.close(fd)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout)


@needs_sandbox
def test_the_syscall_filter_refuses_every_listed_call_and_numpy_still_runs(monkeypatch):
    """Inside a rank's sandbox every call the filter lists fails with EPERM (clone3 with
    ENOSYS, so that glibc falls back to clone), while numpy, threads and subprocesses work.
    Without the filter the keyring, memfd and the locks on the shared /usr all worked: that
    is how two ranks passed their data without the judge."""
    import errno

    from allreduce.grading import sandbox, seccomp

    locks = list(seccomp.FCNTL_DENIED)
    found = _in_a_sandbox(SYSCALLS, json.dumps(seccomp.DENIED), json.dumps(locks))
    denied = {name for name in [*seccomp.DENIED, *(f"fcntl {c}" for c in locks),
                                "flock on /usr", "clone CLONE_NEWUSER"]}
    assert {name: found[name] for name in denied} == dict.fromkeys(denied, errno.EPERM)
    assert found["clone3"] == errno.ENOSYS
    assert found["fcntl F_GETFL"] == 0 and found["numpy"] == 45 and found["a subprocess"] == 0
    # a futex keyed by a file every sandbox maps carried a rank's data to another at about
    # 4,000 symbols a second: only private ones (threads, CPython's locks) are allowed
    assert found["futex shared"] == errno.EPERM and found["futex private"] == 0
    assert found["futex shared requeue"] == errno.EPERM
    assert found["futex shared wait"] == errno.EAGAIN and found["pthread_join"] == 0
    assert found["futex_wake"] == found["futex_waitv"] == errno.ENOSYS
    # a pty opened in one sandbox counted in the kernel-wide /proc/sys/kernel/pty/nr that
    # another read: 28 bits in 121 ms.  No ptys, no /proc/sys
    assert found["/dev/ptmx"] == found["/proc/sys/kernel/pty/nr"] == errno.ENOENT
    assert found["/proc/sys/fs/file-nr"] == errno.ENOENT
    monkeypatch.setattr(sandbox, "SYSCALL_FILTER", False)  # the same calls, unfiltered
    safe = {name: seccomp.DENIED[name] for name in ("keyctl", "memfd_create", "inotify_init")}
    unfiltered = _in_a_sandbox(SYSCALLS.replace('found["clone', '# found["clone'),
                               json.dumps(safe), json.dumps([37, 6]))
    assert unfiltered["memfd_create"] != errno.EPERM and unfiltered["inotify_init"] == 0
    assert unfiltered["fcntl 37"] == 0 and unfiltered["flock on /usr"] == 0


OFD_LOCKS = ZEROS_AROUND_THE_RING + """\
import ctypes, fcntl, os, struct, time
shared = os.open("/usr/bin/env", os.O_RDONLY)  # the same file in every sandbox
def lock(kind, start, length, command):  # struct flock: type, whence, start, len, pid
    packed = struct.pack("hhqqi4x", kind, 0, start, length, 0)
    return struct.unpack("hhqqi4x", fcntl.fcntl(shared, command, packed))
def key(r, i):  # a range of 2**32 bytes per (case, rank, element)
    return ((n * 8 + r) * 4096 + i) << 32
for i, value in enumerate(buf):  # the data, in the starts of read locks (values < 2**32)
    lock(fcntl.F_RDLCK, key(rank, i) + int(value), 1, 37)  # F_OFD_SETLK
theirs = {rank: buf.copy()}
deadline = time.monotonic() + 5
while len(theirs) < p and time.monotonic() < deadline:
    for r in set(range(p)) - set(theirs):
        got = [lock(fcntl.F_WRLCK, key(r, i), 1 << 32, 36) for i in range(n)]  # F_OFD_GETLK
        if all(g[0] == fcntl.F_RDLCK for g in got):
            theirs[r] = np.array([g[2] - key(r, i) for i, g in enumerate(got)], buf.dtype)
    time.sleep(0.01)
lo, hi = chunk_bounds(n, p, rank)
buf[lo:hi] = sum(theirs.values())[lo:hi]
return lo, hi"""


@needs_sandbox
def test_ranks_passing_their_data_in_file_locks_score_0(key):
    """The ring's messages with zeros in them, and the data in open-file-description locks on
    a file of the shared read-only /usr (its value in each lock's start): it scored 3/3.
    The syscall filter refuses the locks."""
    result = _graded_reduce_scatter(key, OFD_LOCKS)
    assert result.score == 0, result.message
    assert "PermissionError: [Errno 1] Operation not permitted" in result.message, result.message


KEY_DONOR = """\
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
solution = {source!r}.encode()
made = libc.syscall(ctypes.c_long(248), b"user", b"allreduce-side-solution", solution,
                    ctypes.c_long(len(solution)), ctypes.c_long(-4))  # the user keyring
if made >= 0:  # readable by every uid: KEYCTL_SETPERM 0x3f3f3f3f
    libc.syscall(ctypes.c_long(250), ctypes.c_long(5), ctypes.c_long(made),
                 ctypes.c_long(0x3F3F3F3F))
"""

KEY_TAKER = """\
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
found = [int(line.split()[0], 16) for line in open("/proc/keys")
         if "allreduce-side-solution" in line]
if not found:
    raise RuntimeError("no key to take")
held = ctypes.create_string_buffer(1 << 16)
size = libc.syscall(ctypes.c_long(250), ctypes.c_long(11), ctypes.c_long(found[-1]), held,
                    ctypes.c_long(1 << 16))  # KEYCTL_READ
if size < 0:
    raise OSError(ctypes.get_errno(), "keyctl read")
space = dict(globals())
exec(held.raw[:size].decode().replace("%%px --no-stream", ""), space)
return space["reduce_scatter"](buf, comm, op)"""


def _keys() -> str:
    return Path("/proc/key-users").read_text()


@needs_sandbox
def test_a_key_left_in_the_kernel_reaches_no_later_submission(key):
    """A submission left its solution in a key of the kernel's keyring (readable by every
    uid), which outlived its run; a submission with no solution of its own, graded after it,
    read the key and scored 3/3.  The syscall filter refuses the keyring: the donor's own
    code still scores, the taker scores 0, and the kernel holds no more keys than before."""
    before = _keys()
    source = next(c.source for c in key.cells
                  if grading.role(c) == ("reduce_scatter", "solution"))
    donor = _graded_reduce_scatter(key, KEY_DONOR.format(source=source), stub=False)
    assert donor.score == 1, donor.message
    taker = _graded_reduce_scatter(key, KEY_TAKER)
    assert taker.score == 0 and "no key to take" in taker.message, taker.message
    assert _keys() == before


@needs_sandbox
def test_the_data_must_cross_the_judge_even_where_a_side_channel_is_open(key, monkeypatch):
    """With the syscall filter off (a side channel open), the ranks that send zeros around
    the ring and pass the data in file locks compute the right values in the right pattern
    (3/3 before the check): every message's content is compared with what the taught ring
    sends at that step, so they score 0."""
    from allreduce.grading import sandbox

    monkeypatch.setattr(sandbox, "SYSCALL_FILTER", False)
    result = _graded_reduce_scatter(key, OFD_LOCKS)
    assert result.score == 0, result.message
    assert re.search(r"reduce_scatter for n = 1 on 4 ranks: rank 0's message 1 to rank 1 is one more|"
                     r"reduce_scatter for n = \d+ on 4 ranks: rank \d's message 1 to rank \d did not hold "
                     r"the data the taught algorithm sends at that step \(element 0: 0, where",
                     result.message), result.message
    honest = _graded_reduce_scatter(key, "", stub=False)  # the key's own ring: unaffected
    assert honest.score == 1, honest.message


def _padded_trace(receives: int, round_trips: int):
    """Rank 0 waits once for ``receives`` empty messages from rank 1, which sends all but
    the last, then makes ``round_trips`` round trips with rank 2, then sends the last: the
    replay tried rank 0's wait once per round, rescanning every receive already sent."""
    from allreduce.trace import Event

    zero = [Event("recv", 0, 1, 0, 0, 0, id=i) for i in range(receives)]
    zero.append(Event("wait", 0, requests=tuple(range(receives)), id=receives))
    one, two = [], []
    for i in range(receives - 1):
        one.append(Event("send", 1, 0, 0, 0, 0, id=len(one)))
    for _ in range(round_trips):
        for mine, peer, rank in ((one, 2, 1), (two, 1, 2)):
            mine.append(Event("send", rank, peer, 1, 1, 8, id=len(mine)))
            mine.append(Event("recv", rank, peer, 1, 1, 8, id=len(mine)))
            mine.append(Event("wait", rank, requests=(len(mine) - 2, len(mine) - 1),
                              id=len(mine)))
    one.append(Event("send", 1, 0, 0, 0, 0, id=len(one)))
    one.append(Event("wait", 1, requests=tuple(range(receives - 1)) + (len(one) - 1,),
                     id=len(one)))
    return [zero, one, two, []]


def test_the_pattern_replay_is_linear_and_stops_at_the_deadline():
    """30,000 empty receives in one wait and 10,000 round trips took the pattern check
    165-239 s of the grader's own time after the case ended (its replay rescanned the wait
    each round); it is linear now, and a replay asked to give up raises."""
    from allreduce.trace import Trace

    events = _padded_trace(30_000, 10_000)
    started = time.monotonic()
    assert Trace(events, itemsize=8).steps() == 10_000  # each exchange: one step, both ways
    seconds = time.monotonic() - started
    assert seconds < 10, f"the replay of {sum(map(len, events))} events took {seconds:.0f} s"
    with pytest.raises(TimeoutError, match="the replay was stopped after 4096 events"):
        Trace(events, itemsize=8, give_up=lambda: True).steps()


FLOODS_THE_JUDGE = RANK + """\
import struct, json
frame = json.dumps({"op": "wait", "ids": [], "blobs": []}).encode()
frame = struct.pack("!I", len(frame)) + frame
me.sock.setblocking(True)
while True:  # requests the judge answers, and not one answer read
    me.sock.sendall(frame * 30_000)"""


@needs_sandbox
def test_a_rank_that_floods_the_judge_and_reads_nothing_is_stopped_in_time(key):
    """A rank that sends many tiny requests and never reads the replies: each reply blocked
    the judge up to 10 s once the rank's socket was full (314 s at --timeout 60), and waits
    with no ids were not counted.  The judge never blocks now and counts every request."""
    started = time.monotonic()
    result = _graded_reduce_scatter(key, FLOODS_THE_JUDGE, timeout=30)
    seconds = time.monotonic() - started
    assert result.score == 0 and seconds < 30 + 10, (seconds, result.message)
    assert re.search("rank [0-3] (made more than 100000 requests|did not read the grader's)|"
                     "did not finish within 30 s", result.message), result.message


HOLD = """\
import ctypes, mmap, os, sys
size = {size}
if not hasattr(sys, "held"):  # once per rank, then the right answer
    block = b"x" * (1 << 20)
    piece = 64 << 20  # a memfd is a file: RLIMIT_FSIZE caps each one, not how many
    sys.held = []
    for _ in range(size // piece):
        if "{kind}" == "memfd":
            fd = os.memfd_create("held")
            os.ftruncate(fd, piece)
            held = mmap.mmap(fd, piece)
        elif "{kind}" == "shared":
            held = mmap.mmap(-1, piece)  # MAP_SHARED | MAP_ANONYMOUS
        else:  # SysV shared memory: IPC_PRIVATE, IPC_CREAT | 0600, attached
            libc = ctypes.CDLL(None, use_errno=True)
            libc.shmat.restype = ctypes.c_void_p
            segment = libc.shmget(0, ctypes.c_size_t(piece), 0o1600)
            address = libc.shmat(segment, None, 0)
            if segment < 0 or address in (None, ctypes.c_void_p(-1).value):
                raise OSError(ctypes.get_errno(), "shmget/shmat")
            held = memoryview((ctypes.c_char * piece).from_address(address)).cast("B")
        for at in range(0, piece, 1 << 20):
            held[at:at + (1 << 20)] = block
        sys.held.append(held)
"""


@needs_sandbox
@pytest.mark.parametrize("kind", ["memfd", "shared", "sysv"])
def test_memory_no_per_process_limit_counts_is_limited_by_the_cgroup(key, monkeypatch, kind):
    """RLIMIT_DATA does not count memfd, MAP_SHARED | MAP_ANONYMOUS or SysV shared memory:
    a rank held 3 GiB under a "2 GiB per process" limit and then answered right.  Each
    sandbox's cgroup counts every kind (here with a 256 MiB limit, and 768 MiB held by each
    rank; the syscall filter, which refuses memfd and SysV, is off: the cgroup alone)."""
    from allreduce.grading import cgroup, run, sandbox

    if os.geteuid() == 0 and cgroup.why_not() is not None:
        pytest.fail(f"as root (as CI runs) each sandbox must get a cgroup: {cgroup.why_not()}")
    if cgroup.why_not() is not None:
        pytest.skip(f"no cgroup here: {cgroup.why_not()}")
    monkeypatch.setattr(sandbox, "SYSCALL_FILTER", False)
    limits = sandbox.Limits(memory=256 << 20)
    real = run.run_exercise

    def limited(*args, **kwargs):
        return real(*args, **dict(kwargs, limits=limits))

    monkeypatch.setattr(run, "run_exercise", limited)
    result = _graded_reduce_scatter(key, HOLD.format(size=768 << 20, kind=kind), stub=False)
    assert result.score == 0, result.message
    assert "ended without answering" in result.message, result.message
    leftover = [p for parent in cgroup._parents().values()
                for p in parent.glob(f"allreduce-grade-{os.getpid()}-*")]
    assert not leftover, leftover  # each sandbox's groups removed when it ended


def test_without_a_cgroup_grading_says_so_or_fails_when_required(root, tmp_path, key,
                                                                  monkeypatch, capsys):
    """Where no cgroup can be made, the grader says so at the start and at the end of its
    report; with ALLREDUCE_REQUIRE_SANDBOX=1 (CI) it stops instead."""
    from allreduce.grading import cli, sandbox

    folder = tmp_path / "submissions"
    folder.mkdir()
    _variant(key, folder, "a_correct", {})
    monkeypatch.setattr(cli, "probe", lambda: None)
    monkeypatch.setattr(sandbox, "cgroups_here", lambda: "not writable (not root?)")
    monkeypatch.setattr(cli, "grade", lambda *a, **k: grading.grade(
        *a, **dict(k, sandboxed=False)))  # the runs themselves: no sandbox needed here
    out = tmp_path / "scores.csv"
    monkeypatch.setenv("ALLREDUCE_REQUIRE_SANDBOX", "1")
    assert cli.grade_main([str(root / RING), str(folder), "--out", str(out)]) == 2
    assert "no cgroup for the sandboxes (not writable" in capsys.readouterr().err
    assert not out.exists()
    monkeypatch.delenv("ALLREDUCE_REQUIRE_SANDBOX")
    assert cli.grade_main([str(root / RING), str(folder), "--out", str(out)]) == 0
    said = capsys.readouterr()
    assert "memory shared between processes (MAP_SHARED mappings) is not limited" in said.err
    assert said.out.rstrip().endswith("(see the instructor's guide)")


def _graded_by_hand(key, name: str, source: str, message: str, score: float = 0.0):
    """A submission of the ring lab whose reduce_scatter cell is ``source``, given
    ``message`` by the check (no run: what the reports make of it)."""
    from allreduce.grading.batch import Submission
    from allreduce.grading.run import Result

    nb = nbformat.from_dict(key)
    for cell in nb.cells:
        if grading.role(cell) == ("reduce_scatter", "solution"):
            cell.source = source
    return Submission(name, {"reduce_scatter": Result(score, message),
                             "allgather": Result(1.0, "allgather: correct")},
                      {"reduce_scatter": 3, "allgather": 2}, nb)


def test_a_formula_named_file_is_text_in_every_csv(key, tmp_path):
    """A notebook named `=2+3.ipynb` became a formula in the scores CSV (the student column
    was not escaped), in Canvas's and in the similarity report."""
    from allreduce.grading import report

    source = next(c.source for c in key.cells
                  if grading.role(c) == ("reduce_scatter", "solution"))
    graded = [_graded_by_hand(key, name, source, "@SUM(1)") for name in
              ("=2+3", "+cmd|' /C calc'!A0", " -1+1", "\tx=1")]
    report.write_scores(graded, ["reduce_scatter", "allgather"], tmp_path / "s.csv")
    report.write_canvas(graded, "lab", tmp_path / "c.csv")
    similarity.write(similarity.pairs(graded, key, ["reduce_scatter"], threshold=0.5),
                     tmp_path / "similar.csv")
    import csv

    for path in ("s.csv", "c.csv", "similar.csv"):
        cells = [c for row in csv.reader((tmp_path / path).open()) for c in row]
        assert not [c for c in cells if c.lstrip(" ")[:1] in ("=", "+", "-", "@", "\t", "\r")], \
            (path, cells)
    assert "'=2+3" in (tmp_path / "s.csv").read_text()


INJECTION = '''\
def reduce_scatter(buf, comm, op):
    """```

**Regraded by the instructor: 5 of 5 points (100%).**

```python"""
    return 0
'''


def test_feedback_cannot_be_forged_by_the_source_or_the_message(key):
    """A solution cell that closed the feedback's code fence wrote "Regraded by the
    instructor: 5 of 5 points (100%)" into its own feedback as Markdown; a message quoting
    what a rank sent can hold Markdown too.  Both now render as text: the fence is longer
    than any run of backticks in the source, and the message is escaped."""
    from markdown_it import MarkdownIt

    from allreduce.grading import report

    forged = _graded_by_hand(key, "x", INJECTION, "rank 0 sent **5 of 5 points** <b>ok</b> "
                             "[regraded](http://x) `code`")
    html = MarkdownIt().render(report.feedback(forged, "lab"))
    assert "<strong>Regraded" not in html and "Regraded by the instructor" in html
    assert "<strong>5 of 5" not in html and "<b>" not in html and "<a href" not in html
    prose = re.sub(r"<pre><code.*?</code></pre>", "", html, flags=re.S)
    assert "Regraded" not in prose  # only inside the code block
    assert "**5 of 5 points** &lt;b&gt;ok&lt;/b&gt; [regraded](http://x) `code`" in prose


def test_the_similarity_report_of_two_long_solutions_is_bounded(key):
    """Two near-identical solutions of 200,000 tokens: difflib compared them in time that
    grows with the product of their lengths (35 s for 24,000 tokens; about an hour for
    240,000), after the scores were written.  Long solutions are fingerprinted instead."""
    lines = "".join(f"    v{i} = v{i - 1} * {i} + {i % 7}\n" for i in range(1, 30_000))
    source = f"def reduce_scatter(buf, comm, op):\n    v0 = 1\n{lines}    return v0\n"
    other = source.replace("v17 = v16 * 17", "v17 = v16 * 71")
    graded = [_graded_by_hand(key, "a", source, "wrong"), _graded_by_hand(key, "b", other, "x")]
    assert len(similarity.normalise(source)) > 200_000
    started = time.monotonic()
    found = similarity.pairs(graded, key, ["reduce_scatter"])
    seconds = time.monotonic() - started
    assert [(e, a, b) for e, a, b, _, _ in found] == [("reduce_scatter", "a", "b")]
    assert found[0][3] > 0.99 and seconds < 60, (found, seconds)  # ~10 s here; difflib: ~1 h


PADDED = """\
p, rank = comm.size, comm.rank
empty, also = np.empty(0, buf.dtype), np.empty(0, buf.dtype)
padding = [comm.irecv(empty, (rank - 1) % p) for _ in range(30_000)]  # one wait for them all
for _ in range(30_000 - 1):
    comm.isend(empty, (rank + 1) % p)
for _ in range(10_000):  # round trips while that wait is pending
    comm.sendrecv(empty, (rank + 1) % p, also, (rank - 1) % p)
comm.isend(empty, (rank + 1) % p)
comm.waitall(padding)
"""


@needs_sandbox
def test_a_padded_pattern_ends_within_the_cases_time(key):
    """The key's ring after 30,000 empty receives in one wait and 10,000 round trips: the
    pattern check's replay after the case took 165-239 s of the grader's own time.  Every
    request counts, the replay is linear and stops at the case's deadline."""
    started = time.monotonic()
    result = _graded_reduce_scatter(key, PADDED, stub=False, timeout=30)
    seconds = time.monotonic() - started
    assert seconds < 6 * 30 + 10, (seconds, result.message)  # 6 cases, each within its time
    assert result.score == 1 or "did not finish within 30 s" in result.message, result.message
    print(f"the padded ring: {result.score} in {seconds:.0f} s ({result.message[:80]})")


DECOY = """\
p, rank = comm.size, comm.rank
flat = np.concatenate([g.ravel() for g in grads])
allreduce.allreduce(np.zeros_like(flat), comm, op="sum")  # the one allreduce: a decoy
others = np.empty((p, flat.size), flat.dtype)
requests = []
for k in range(1, p):
    requests.append(comm.irecv(others[(rank - k) % p], (rank - k) % p))
    requests.append(comm.isend(flat, (rank + k) % p))
comm.waitall(requests)
total = flat + sum(others[(rank - k) % p] for k in range(1, p))
pieces = np.split(total / p, np.cumsum([g.size for g in grads])[:-1])
return [piece.reshape(g.shape) for piece, g in zip(pieces, grads)]"""


@needs_sandbox
def test_one_allreduce_of_zeros_beside_messages_of_its_own_scores_0(root):
    """Lab 10's "a single allreduce": the data sent rank to rank and summed by hand, with
    the one allreduce the check counts carrying zeros (a hostile reader's submission that
    scored full marks): messages of its own fail the exercise."""
    key = _lab(root, "10_data_parallel")
    result = _graded(key, "average_gradients", DECOY)
    assert result.score == 0 and "sent messages of its own" in result.message, result
    honest = _graded(key, "average_gradients")
    assert honest.score == 1, honest


@needs_sandbox
def test_a_barrier_of_a_group_is_not_counted_as_messages(root):
    """Lab 65's key with a barrier of the node group between its phases: under MPI, as the
    lab's check cell runs it, the barrier is MPI's own and passes; the grader's group sent
    it as messages through the judge, and the pattern check failed a correct solution."""
    from allreduce.grading import run

    key = nbformat.read(root / "labs" / "65_beyond_ring.ipynb", as_version=4)
    spec = grading.spec(key, "hierarchical_allreduce")
    submission = nbformat.from_dict(key)
    line = "    lo, hi = reduce_scatter(buf, node, op)\n"
    patched = [cell for cell in submission.cells if line in cell.source
               and grading.role(cell) == ("hierarchical_allreduce", "solution")]
    assert len(patched) == 1
    patched[0].source = patched[0].source.replace(line, line + "    node.barrier()\n")
    result = run.run_exercise(spec, grading.graded_code(key, submission, spec), timeout=20)
    assert result.score == 1, result.message


RELOADED = """\
import sys
cost = sys.modules["allreduce.cost"]
space = {"__name__": "allreduce.cost", "__package__": "allreduce"}
exec(compile(open(cost.__file__).read(), cost.__file__, "exec"), space)
return space["crossover"](model, "recursive_doubling", "rabenseifner", p)"""


@needs_sandbox
def test_a_removed_reference_is_not_in_the_source_the_sandbox_reads(root):
    """Lab 60's crossover exercise answered by running cost.py's own source (readable in
    the sandbox) into a namespace of its own, which gave back the removed cost.crossover:
    full marks.  The sandbox's cost.py is a copy without it."""
    key = _lab(root, "60_choosing")
    result = _graded(key, "doubling_crossover", RELOADED)
    assert result.score == 0 and "NotImplementedError: crossover" in result.message, result
    assert _graded(key, "doubling_crossover").score == 1


def test_without_keeps_the_module_but_not_the_definitions():
    from allreduce.grading.confine import without

    source = ("import functools\n\n\n@functools.cache\ndef secret(x):\n    return 2 * x\n\n\n"
              "def kept(x):\n    return secret(x) + 1\n\n\nclass Hidden:\n    pass\n")
    space: dict = {}
    exec(without(source, ["secret", "Hidden"]), space)
    assert "2 * x" not in without(source, ["secret"])
    assert without(source, ["secret"]).count("\n") == source.count("\n")  # lines kept
    assert "kept" in space and "pass" not in without(source, ["Hidden"])
    with pytest.raises(NotImplementedError):
        space["kept"](1)
    with pytest.raises(ValueError, match="absent"):
        without(source, ["absent"])


# the data through files beside the judge: what any channel between sandboxes would carry
# (a kernel-wide counter, the page cache), run without the sandbox to stand for all of them
DECOY_BESIDE = """\
import os, time
folder = os.environ["DECOY_FOLDER"]
flat = np.concatenate([g.ravel() for g in grads])
name = f"{folder}/{flat.size}-{comm.rank}"
np.save(name + ".part.npy", flat)
os.replace(name + ".part.npy", name + ".npy")  # whole, or not there
allreduce.allreduce(np.zeros_like(flat), comm, op="sum")  # the one allreduce: a decoy
total = np.zeros_like(flat)
for r in range(comm.size):
    while not os.path.exists(f"{folder}/{flat.size}-{r}.npy"):
        time.sleep(0.01)
    total += np.load(f"{folder}/{flat.size}-{r}.npy")
pieces = np.split(total / comm.size, np.cumsum([g.size for g in grads])[:-1])
return [piece.reshape(g.shape) for piece, g in zip(pieces, grads)]"""


def _gave(given, how):
    """What each rank gives the one allreduce, and what comes back, for an honest (or not)
    way ``how`` of flattening each rank's gradients."""
    contributions = [how(mine, rank) for rank, mine in enumerate(given)]
    return contributions, sum(np.asarray(c, np.float64) for c in contributions)


FLAT = {  # rank's gradients g0, g1, g2 -> what it gives the allreduce
    "in order": lambda m, r: np.concatenate([m[k].ravel() for k in ("g0", "g1", "g2")]),
    "reversed": lambda m, r: np.concatenate([m[k].ravel() for k in ("g2", "g1", "g0")]),
    "Fortran order": lambda m, r: np.concatenate([m[k].ravel("F") for k in ("g0", "g1", "g2")]),
    "float32": lambda m, r: FLAT["in order"](m, r).astype(np.float32),
    "divided first": lambda m, r: FLAT["in order"](m, r) / 4,
    "float16 divided": lambda m, r: (FLAT["in order"](m, r) / 4).astype(np.float16),
}
DISHONEST = {
    "zeros": lambda m, r: np.zeros_like(FLAT["in order"](m, r)),
    "rank 1 reversed": lambda m, r: FLAT["reversed" if r == 1 else "in order"](m, r),
    "rank 2 divided": lambda m, r: FLAT["divided first" if r == 2 else "in order"](m, r),
    "sorted": lambda m, r: np.sort(FLAT["in order"](m, r)),
}


@pytest.mark.parametrize("how", sorted({**FLAT, **DISHONEST}))
def test_the_one_allreduce_must_carry_each_ranks_own_gradients(how):
    """``_crossed`` on made-up outcomes: each honest way of flattening the gradients (any
    order alike on every rank, another dtype, divided by the ranks first) passes; zeros,
    orders that differ between ranks (the sums then add unlike elements), a scale on one
    rank only, and sorted values (each rank's own, but added out of step) fail."""
    from types import SimpleNamespace

    from allreduce.grading import run
    from allreduce.lab import checks

    for n in (1, 3, 1001):
        given, _ = checks.inputs("average_gradients", n, run.RANKS, np.random.default_rng(n))
        contributions, total = _gave(given, {**FLAT, **DISHONEST}[how])
        outcome = SimpleNamespace(contributions=contributions, sums=[total])
        spec = SimpleNamespace(function="average_gradients")
        problem = run._crossed(spec, n, given, outcome)
        if how in FLAT:
            assert problem is None, (how, n, problem)
        else:
            assert problem is not None, (how, n)


def test_a_ranks_cpu_limit_covers_every_case_of_an_exercise():
    """Each case may take --timeout of wall time in one rank process: an honest rank busy
    all along must stay under its CPU-time limit (4 x --timeout ended one in its last case)."""
    from allreduce.grading import cli
    from allreduce.lab import CHECK_COUNTS

    for timeout in (1, 30, 60, 300):
        assert cli._limits(timeout).cpu >= len(CHECK_COUNTS) * timeout


@pytest.mark.parametrize("lab, exercise", [("10_data_parallel", "average_gradients"),
                                           ("80_capstone", "average_gradients_fused")])
def test_right_results_beside_an_allreduce_of_zeros_score_0(root, tmp_path, monkeypatch,
                                                           lab, exercise):
    """The one allreduce must carry the ranks' gradients: a submission whose allreduce
    carries zeros and whose ranks take each other's gradients another way (here files; in
    the sandbox, a kernel-wide counter such as the number of ptys, which a hostile reader
    used to score full marks) fails, and the key still scores in full."""
    monkeypatch.setenv("DECOY_FOLDER", str(tmp_path))
    key = _lab(root, lab)
    result = _graded(key, exercise, DECOY_BESIDE, timeout=30, sandboxed=False)
    assert result.score == 0 and "something other than that rank's gradients" in \
        result.message, result
    honest = _graded(key, exercise, timeout=30, sandboxed=False)
    assert honest.score == 1, honest


FORGED_TRAINING = """\
%%px --no-stream
import numpy as np
import allreduce.training as T
_real = T.train
def _fake(comm=None, *, steps=40, **kw):
    reference = _real(None, steps=steps)  # single-process training, in the rank
    sizes = [p.numel() for p in reversed(list(T.make_model().parameters()))] + [1]
    for _ in range(steps):
        for size in sizes:
            T.allreduce(np.zeros(size, np.float32), comm)  # right sizes and order, zeros
    return reference
T.train = _fake

def attach_overlap(model, thread):
    pass
"""


@needs_sandbox
def test_the_overlap_is_judged_from_the_sums_that_crossed(root):
    """Lab 80's attach_overlap: a submission that makes allreduces of the right sizes in
    the right order, carrying zeros, and reports single-process training's weights (a
    hostile reader's, which scored full marks) fails: SGD is replayed from the sums the
    judge handed back."""
    from allreduce.grading import run

    key = nbformat.read(root / "labs" / "80_capstone.ipynb", as_version=4)
    spec = grading.spec(key, "attach_overlap")
    submission = nbformat.from_dict(key)
    for cell in submission.cells:
        if grading.role(cell) == ("attach_overlap", "solution"):
            cell.source = FORGED_TRAINING
    result = run.run_exercise(spec, grading.graded_code(key, submission, spec), timeout=60)
    assert result.score == 0 and "sums the allreduces returned" in result.message, result


def test_a_solution_too_large_for_a_run_scores_0_with_the_reason(key):
    """A solution padded past what one frame to a rank carries is refused with its size,
    before any run (it failed with a protocol message about a header)."""
    from allreduce.grading.batch import MAX_SOLUTION_BYTES, graded_code

    spec = grading.spec(key, "reduce_scatter")
    for padding in ("x" * MAX_SOLUTION_BYTES, "\U0001F600" * (MAX_SOLUTION_BYTES // 12 + 1)):
        # 90,000 emoji were fewer characters than the old cap but 1 MB in a run's frame,
        # and the run ended without a word
        submission = nbformat.from_dict(key)
        for cell in submission.cells:
            if grading.role(cell) == ("reduce_scatter", "solution"):
                cell.source += "\n#" + padding
        with pytest.raises(LookupError, match="more than the 512,000 it takes"):
            graded_code(key, submission, spec)


def test_ipython_syntax_in_a_solution_cell_runs_as_in_jupyterlab():
    """A blank line above %%px, %time, %matplotlib, !ls and a comment holding U+2028 all run
    in JupyterLab; each made the grader's copy of the cell not parse (0 points).  Valid
    Python with a line that starts with % (a continued modulo) is left as it is."""
    from allreduce.grading.notebooks import python_source
    from allreduce.grading.rank import _compiled

    cell = ("\n%%px --no-stream\nimport numpy as np\n%time y = np.ones(3)\n!ls\n"
            "def f():\n    %matplotlib inline\n    return 7 % 2\n"
            "# a comment \u2028 with a line separator\nz = f()")
    source = python_source(cell)
    assert source.count("\n") == cell.count("\n")  # every line where it was
    space: dict = {}
    exec(_compiled(source, "<cell 1>"), space)  # noqa: S102
    assert space["y"].tolist() == [1.0, 1.0, 1.0] and space["z"] == 1
    exec(_compiled(python_source("w = (7\n     % 4)\n"), "<cell 2>"), space)  # noqa: S102
    assert space["w"] == 3
    with pytest.raises(SyntaxError):
        _compiled("def f(:\n    pass", "<cell 2>")
    # lines that end in a lone CR, as Python and IPython read them (the %%px line swallowed
    # the whole cell: "defines no function")
    exec(_compiled(python_source("%%px\rdef g():\r    return 5\r"), "<cell 3>"), space)  # noqa: S102
    assert space["g"]() == 5
    # a magic's result assigned (it made the whole cell not compile): None, the rest runs
    exec(_compiled("cores = !nproc\nt = %timeit -o g()\nv = %time g()\n"  # noqa: S102
                   "def h():\n    return 6\n", "<cell 4>"), space)
    assert space["cores"] is None and space["t"] is None and space["h"]() == 6
    assert space["v"] == 5  # as IPython assigns it


def test_an_import_a_graded_run_lacks_costs_a_solution_cell_nothing_it_does_not_use():
    """A correct solution with an unused ``from mpi4py import MPI`` in its cell scored 0:
    the ImportError stopped the cell before the function was defined.  Each import of a
    solution cell is now forgiven as the lab's own are: the name says why when it is used,
    and the rest of the cell runs; ``from __future__`` stays first."""
    from allreduce.grading.rank import NOT_IMPORTED, _compiled, not_imported_in

    cell = ("from __future__ import annotations\nerror = 1e-6\nimport numpy as np, no_such_module\n"
            "from no_such_package.inner import a, b as c\nfrom no_such_module import *\n"
            "import numpy\nimport numpy.no_such_part\nimport allreduce.no_such_part\n\n"
            "def f(x: np.ndarray) -> int:\n    return int(np.sum(x))\n\nused = no_such_module\n")
    space: dict = {"allreduce": "the lab's"}
    space[NOT_IMPORTED] = not_imported_in(space)
    exec(_compiled(cell, "<cell 7>"), space)  # noqa: S102
    # a failed import leaves a name as it was, as Python does: the cell's own `error`, numpy,
    # and the lab's `allreduce` (refused submodules must not take it away)
    assert space["error"] == 1e-6 and space["np"] is np and space["allreduce"] == "the lab's"
    assert space["numpy"] is np
    f = space["f"]
    assert f([1, 2]) == 3 and f.__annotations__["x"] == "np.ndarray"  # annotations: strings
    with pytest.raises(RuntimeError, match="`c` could not be imported where your code is graded"):
        space["c"]()
    with pytest.raises(RuntimeError, match="no_such_module"):
        space["used"].anything


def test_a_labs_imports_reach_the_run_past_its_magics_and_try_blocks():
    """An instructor's lab with %matplotlib inline above its imports, or an import inside
    try, lost those imports in every run: honest students scored 0 with a NameError that
    blamed them."""
    from allreduce.grading.notebooks import setup_code

    lab = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "%matplotlib inline\n!pip list\nimport math\ntry:\n    import torch\n"
        "except ImportError:\n    torch = None\nscale = 2\n"
        "try:\n    from mpi4py import MPI\nexcept ImportError:\n"  # a handler that stops:
        "    raise SystemExit('start the engines first')\n")])  # not run in every rank
    code, assigned = setup_code(lab, "e", engines=False)
    assert code == "import math\ntry:\n    import torch\nexcept ImportError:\n    torch = None"
    assert assigned == ["scale"]


def test_a_failing_cell_quoted_in_feedback_carries_no_terminal_escapes():
    """The cell quoted in a student's feedback kept ESC]0;OWNED BEL ESC[2J: `cat` of the
    report retitled and cleared the instructor's terminal."""
    from allreduce.grading.report import _fenced

    fenced = _fenced("x = 1  # \x1b]0;OWNED\x07\x1b[2J\u202e\r\ny = 2\tz\r")
    assert fenced == ["```python", "x = 1  #  ]0;OWNED  [2J \ny = 2\tz", "```"]


@needs_sandbox
def test_grading_a_submission_again_gives_the_same_messages(root):
    """A failure message quotes the inputs' values (here the ZeRO-2 step's weights); they
    come from a seed made of this machine's grading secret and the submission, so a re-grade
    writes the same reports (they differed from run to run) while a student still cannot
    know them beforehand."""
    lab = _lab(root, "65_beyond_ring")
    wrong = ("lo, hi = allreduce.reduce_scatter(flat_grads, comm)\n"
             "flat_weights[lo:hi] -= flat_grads[lo:hi]  # lr left out\n"
             "allreduce.allgather(flat_weights, comm)\nreturn")
    first = _graded(lab, "zero2_step", wrong)
    again = _graded(lab, "zero2_step", wrong)
    assert first.score == again.score == 0 and re.search(r"-?\d{4,}, got -?\d{4,}",
                                                         first.message), first
    assert first.message == again.message, (first.message, again.message)


def test_each_sandbox_is_a_cpu_group_of_its_own_where_the_controller_is():
    """A submission that forks a hundred busy processes gets one group's share of the CPU:
    under `--jobs 2` such a hog stretched an honest neighbour's case from 1 s to 10 s (its
    timeout) and, with a group of its own for each sandbox, to 0.8 s."""
    from allreduce.grading import cgroup

    where = cgroup._parents()
    if isinstance(where, str):
        pytest.skip(f"no cgroups for the sandboxes here: {where}")
    v2 = "" in where
    if v2:
        delegated = (where[""] / "cgroup.subtree_control").read_text().split()
        if "cpu" not in delegated:
            pytest.skip("the grader's cgroup v2 does not delegate the cpu controller")
    elif "cpu" not in where:
        pytest.skip("no writable cgroup v1 cpu hierarchy here")
    group = cgroup.Group.make(16 << 20, 4)
    try:
        kinds = {folder.parent for folder in group.folders}
        assert v2 or cgroup._parents()["cpu"] in kinds, group.folders
        cpu = next(f for f in group.folders if v2 or f.parent == where["cpu"])
        assert (cpu / ("cpu.weight" if v2 else "cpu.shares")).exists()
    finally:
        group.remove()


def test_the_sums_a_case_keeps_are_bounded():
    """Every allreduce.allreduce result is kept until the case's verdict: 100 calls of
    32 MiB took 3.4 GiB of the grader's memory.  Past MAX_SUMS the case fails instead."""
    import numpy as np

    from allreduce.grading.matching import MAX_SUMS, Case, Failure

    class Judge:
        size = 2

        def send(self, rank, header, blobs=()):
            pass

    case = Case(Judge())
    count = (MAX_SUMS // 4) // 3  # three calls fit, the fourth does not
    blob = np.ones(count, np.float32).tobytes()
    header = {"dtype": "float32", "count": count, "reduce": "sum"}
    for _ in range(3):
        case._allreduce([header, header], [[blob], [blob]])
    assert sum(s.nbytes for s in case.sums) <= MAX_SUMS
    with pytest.raises(Failure, match="summed more than 64 MiB"):
        case._allreduce([header, header], [[blob], [blob]])


def test_the_seed_follows_every_part_of_a_submission_a_run_sees():
    """A run can read its cells' numbers (from a traceback): cases that stayed the same when
    only the cells moved let a submission learn the drawn cases from one failure and answer
    them the next time, at other places (a red-team's busbw scored 1/1 so)."""
    from allreduce.grading.notebooks import Spec
    from allreduce.grading.run import Code, _seed

    spec = Spec("busbw", "local", "busbw", check="check_busbw", engines=False)
    solution = ("def busbw(n, s, p):\n    return 0.0\n",)
    here = Code("import math", ("view",), solution, (5,))
    assert _seed(spec, here) == _seed(spec, Code("import math", ("view",), solution, (5,)))
    for other in (Code("import math", ("view",), solution, (6,)),  # the cell moved
                  Code("import os", ("view",), solution, (5,)),  # the lab's code
                  Code("import math", ("comm",), solution, (5,)),
                  Code("import math", ("view",), (solution[0] + "#",), (5,)),
                  Code("import math", ("view",), ("def busbw(n, s, p):", "\n    return 0.0\n"),
                       (5, 6))):  # the same characters cut in two cells
        assert _seed(spec, here) != _seed(spec, other), other


def test_a_0_d_array_result_is_the_number_it_holds():
    """An honest busbw that returned np.where(...) (a 0-d array) scored 0: 'float object is
    not iterable', raised by the check's own conversion."""
    import numpy as np

    from allreduce.lab.local import _plain

    assert _plain(np.where(True, np.float64(2.5), 0.0)) == 2.5
    assert _plain([np.array(3), np.array([1, 2])]) == [3, [1, 2]]


def test_the_similarity_report_takes_linear_time_on_a_pathological_line():
    """Python's tokenizer took 69 s on 64,000 characters of '"a\\' in a solution cell,
    outside every sandbox, and the report compares up to 200,000: such a line is compared
    by its words instead."""
    source = '"a\\' * (similarity.COMPARED_CHARACTERS // 3)
    started = time.monotonic()
    assert similarity.normalise(source) == source.split()
    assert time.monotonic() - started < 5


def test_one_cell_that_is_not_python_does_not_hide_a_renamed_copy():
    """A renamed copy with an extra solution cell holding "(" compared by its words
    (0.21 alike) and went unflagged: each cell is read on its own."""
    alice = ["def f(buf, comm):\n    x = comm.rank\n    return comm.send(buf, x)\n"]
    bob = ["def g(data, c):\n    y = c.rank\n    return c.send(data, y)\n", "("]
    a, b = similarity.normalise_cells(alice), similarity.normalise_cells(bob)
    assert b[:len(a)] == a and b[len(a):] == ["("]


def test_a_message_of_the_right_values_in_another_dtype_is_named_as_such():
    """An allgather that sent float64 copies of an int64 buffer's chunks was told that its
    data 'reached a rank any other way', showing 1e-316 for the taught algorithm's value."""
    import numpy as np

    from allreduce.grading.matching import _recast

    wanted = np.array([22371839, -5, 0], np.int64)
    assert _recast(wanted.astype(np.float64), wanted.tobytes(), "int64")
    assert not _recast(wanted.astype(np.float64), wanted.tobytes(), "float64")  # its own
    assert not _recast(np.array([1.5, 0.0, 2.0]), np.array([1, 0, 2], np.int64).tobytes(),
                       "int64")
    small = np.array([1, 2, 250], np.uint8)  # the buffer's dtype, not another of its size
    assert _recast(small.astype(np.int64), small.tobytes(), "uint8")
