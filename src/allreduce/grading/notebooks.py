"""How the labs are marked up, student copies, and what the grader reads from a notebook.

* a **solution cell** has ``metadata.allreduce = {"exercise": NAME, "role": "solution"}``
  and contains one or more regions between ``### BEGIN SOLUTION`` and ``### END SOLUTION``
  (nbgrader's markers);
* a **check cell** has ``{"exercise": NAME, "role": "check", "points": P}``; the one that
  calls ``lab.check(...)``, ``lab.check_overlap(...)`` or a kernel check (``lab.check_fit``
  and the others) says which function is checked and how, and carries the exercise's points
  (1 if it names none).

:func:`spec` reads that call (it is never run); :func:`setup_code` takes from the cells
before an exercise only what its function needs to exist: imports and definitions, and the
names the other cells assign, which the grader binds to a placeholder that explains itself.
"""

from __future__ import annotations

import ast
import copy
import re
from dataclasses import dataclass
from pathlib import Path

from .rank import without_line_magics

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"


def nbformat():
    import nbformat as module

    return module


def role(cell) -> tuple[str, str] | None:
    """``(exercise, role)`` of a marked cell, else ``None``."""
    metadata = cell.get("metadata", {})
    mark = metadata.get("allreduce") if isinstance(metadata, dict) else None
    if not isinstance(mark, dict) or not isinstance(mark.get("exercise"), str):
        return None  # not marked, or marked by hand in a way the grader does not read
    return (mark["exercise"], mark.get("role"))


def lab_label(path: Path) -> str:
    """"lab 50 (50_ring_allreduce.ipynb)", from a lab's file name."""
    number = path.name.split("_", 1)[0]
    return f"lab {number} ({path.name})" if number.isdigit() else f"lab {path.name}"


def wrong_lab(key, nb, lab: Path, read, submissions=()) -> str | None:
    """Why notebook ``nb`` is not a submission of ``lab`` (whose key is ``key``), or ``None``
    when it has solution cells of at least one of the lab's exercises.  Names the lab beside
    ``lab`` whose exercises it has, when there is one: each other notebook there that is
    not one of the ``submissions`` (the key may sit in their folder), read with ``read``
    (which refuses links, pipes and oversized files: it returns something without cells)."""
    theirs = {mark[0] for cell in nb.cells if (mark := role(cell)) and mark[1] == "solution"}
    if theirs & set(exercises(key)):
        return None
    skip = {path.name for path in submissions} if lab.parent.resolve() in {
        path.parent.resolve() for path in submissions} else set()
    for other in sorted(lab.parent.glob("*.ipynb")) if theirs else []:
        if other.name == lab.name or other.name in skip:
            continue
        try:
            names = set(exercises(read(other)))
        except Exception:  # noqa: BLE001, S112 - not a lab: it names nothing
            continue
        if theirs & names:
            return (f"this looks like {lab_label(other)}, not {lab_label(lab)}: it has that "
                    f"lab's exercises ({', '.join(sorted(theirs & names))}) and none of this "
                    "one's. Is it the right file?")
    return f"this notebook has no exercises of {lab_label(lab)}: is it the right file?"


def exercises(nb) -> list[str]:
    """The lab's exercises, in the order their check cells appear."""
    names: list[str] = []
    for cell in nb.cells:
        mark = role(cell)
        if mark and mark[1] == "check" and mark[0] not in names:
            names.append(mark[0])
    return names


# -- what each exercise's check is ----------------------------------------------------------------

@dataclass(frozen=True)
class Spec:
    """One exercise as its check cell states it.  ``kind`` is ``"ranks"`` (``lab.check`` on
    the engines), ``"overlap"`` (``lab.check_overlap``) or ``"local"`` (a kernel check, named
    by ``check``)."""

    exercise: str
    kind: str
    function: str
    points: float = 1.0
    phase: str = ""
    pattern: str = ""
    check: str = ""
    engines: bool = True  # the function lives on the engines (a %%px cell)


def _call(source: str) -> ast.Call | None:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "lab"
                and node.func.attr.startswith("check")):
            return node
    return None


def _constant(node) -> str:
    if not isinstance(node, ast.Constant) or not isinstance(node.value, str):
        raise TypeError(f"a check cell must name the function as a string: {ast.unparse(node)}")
    return node.value


def spec(nb, exercise: str) -> Spec:
    """The check of ``exercise``, from the first of its check cells that calls ``lab.check*``."""
    from ..lab import LOCAL_CHECKS, PATTERNS, PHASES
    from ..lab.patterns import DEFAULT_PATTERN

    for cell in nb.cells:
        if role(cell) != (exercise, "check") or (call := _call(cell.source)) is None:
            continue
        points = float(cell.metadata["allreduce"].get("points", 1))
        keywords = {k.arg: k.value for k in call.keywords}
        name = call.func.attr
        if name == "check":
            function, phase = _constant(call.args[1]), _constant(call.args[2])
            pattern = _constant(keywords["pattern"]) if "pattern" in keywords \
                else DEFAULT_PATTERN.get(phase, "")
            if phase not in PHASES or pattern not in PATTERNS:
                raise ValueError(f"exercise {exercise!r}: unknown phase {phase!r} or pattern "
                                 f"{pattern!r}")
            return Spec(exercise, "ranks", function, points, phase=phase, pattern=pattern)
        if name == "check_overlap":
            return Spec(exercise, "overlap", _constant(call.args[1]), points)
        if name in LOCAL_CHECKS:
            if not call.args or not isinstance(call.args[0], ast.Name):
                raise ValueError(f"exercise {exercise!r}: {name} must be given the function")
            return Spec(exercise, "local", call.args[0].id, points, check=name, engines=False)
        raise ValueError(f"exercise {exercise!r}: the grader does not know lab.{name}")
    raise ValueError(f"exercise {exercise!r} has no check cell that calls lab.check*")


def specs(nb) -> list[Spec]:
    """Every exercise's :func:`spec`; a check call missing an argument is a ``ValueError``
    (a student's edited check cell, read by ``--self``)."""
    try:
        return [spec(nb, name) for name in exercises(nb)]
    except (IndexError, KeyError, AttributeError) as error:
        raise ValueError(f"a check cell's lab.check call is missing something "
                         f"({type(error).__name__}: {error})") from None


# -- the code a run needs -------------------------------------------------------------------------

def is_engine_cell(source: str) -> bool:
    return source.lstrip().startswith("%%px")  # IPython drops the blank lines above a magic


#: Cell magics whose body is plain Python: the grader blanks their line.
PYTHON_CELL_MAGICS = ("%%px", "%%time", "%%timeit", "%%capture")


def python_source(source: str) -> str:
    """A cell's source as plain Python, each line where it was (a message's line numbers are
    the cell's own).  As IPython reads it: lines end at CR LF, LF or a lone CR only (a
    comment may hold U+2028, which ``str.splitlines`` would break), and a cell magic is the first line that
    is not blank, whose line is blanked when its body is Python (:data:`PYTHON_CELL_MAGICS`),
    and whose whole cell is blank otherwise (``%%writefile``: JupyterLab runs no Python).
    Line magics are left to the run (:func:`allreduce.grading.rank.without_line_magics`):
    nothing here parses a submission's code."""
    lines = re.split(r"\r\n|\r|\n", source)  # a lone CR ends a line too, for Python and IPython
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is not None and lines[first].lstrip().startswith("%%"):
        if not lines[first].lstrip().startswith(PYTHON_CELL_MAGICS):
            return "\n" * (len(lines) - 1)  # %%writefile, %%bash: no Python runs in JupyterLab
        lines[first] = ""
    return "\n".join(lines)


def solution_sources(nb, exercise: str) -> list[str]:
    return [python_source(cell.source) for cell in nb.cells
            if role(cell) == (exercise, "solution")]


def setup_code(nb, exercise: str, engines: bool) -> tuple[str, list[str]]:
    """From the code cells before the exercise's first solution cell, on the same side
    (engines or kernel) and not solution cells: their imports and definitions, as source,
    and the names they assign otherwise (``world``, ``comm``, ...)."""
    keep, assigned = [], []
    marked = any(_is_lab_cell(cell) for cell in nb.cells)
    for cell in nb.cells:
        if role(cell) == (exercise, "solution"):
            break
        if cell.cell_type != "code" or role(cell) or is_engine_cell(cell.source) != engines:
            continue
        if marked and not _is_lab_cell(cell):
            continue  # a cell the student added: the instructor's grading runs the lab's
        source = python_source(cell.source)
        try:
            tree = ast.parse(source)
        except SyntaxError:  # %matplotlib inline above the imports: read as IPython would
            try:
                tree = ast.parse(without_line_magics(source))
            except SyntaxError:
                continue
        for node in tree.body:
            if isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef)) \
                    or _guarded_import(node):
                keep.append(ast.unparse(node))
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                assigned += [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
    return "\n".join(keep), sorted(set(assigned))


def _guarded_import(node) -> bool:
    """``try: import x`` with plain fallbacks (``except ImportError: x = None``): a lab's
    optional import, kept whole.  Only imports in its body, and handlers of ``ImportError``
    that import, assign a constant or pass: a handler that stops (``raise SystemExit``
    when mpi4py is missing, which every run refuses) would end every rank."""
    def plain(statements) -> bool:
        return all(isinstance(s, (ast.Import, ast.ImportFrom, ast.Pass)) or (
            isinstance(s, ast.Assign) and isinstance(s.value, ast.Constant)) for s in statements)

    def of_imports(handler) -> bool:
        caught = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        return all(isinstance(name, ast.Name) and name.id in ("ImportError", "ModuleNotFoundError")
                   for name in caught)

    return (isinstance(node, ast.Try) and not node.orelse and not node.finalbody
            and all(isinstance(s, (ast.Import, ast.ImportFrom)) for s in node.body)
            and all(of_imports(h) and plain(h.body) for h in node.handlers))


# -- student copies ---------------------------------------------------------------------------------

def stub_solutions(source: str, exercise: str) -> str:
    """``source`` with each solution region replaced by a ``NotImplementedError`` stub at
    the region's indentation."""
    out, inside = [], False
    for line in source.splitlines():
        if BEGIN in line:
            if inside:
                raise ValueError(f"exercise {exercise!r}: {BEGIN} inside a solution region")
            inside = True
            indent = line[: len(line) - len(line.lstrip())]
            out.append(f'{indent}raise NotImplementedError("exercise {exercise}: replace this '
                       f'line with your solution")')
        elif END in line:
            if not inside:
                raise ValueError(f"exercise {exercise!r}: {END} without {BEGIN}")
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise ValueError(f"exercise {exercise!r}: {BEGIN} without {END}")
    return "\n".join(out)


#: What the grader checks, by the kind of an exercise's check (:class:`Spec`), for the cell
#: that shows a student its points.
_CHECKED = {"ranks": "the values and the messages your code sends",
            "local": "what your function returns, on the lab's cases and on more it draws",
            "overlap": "the weights your hooks train to and when each gradient is handed over"}


def _points_cell(spec: Spec, total: float):
    exercise, points = spec.exercise, spec.points
    cell = nbformat().v4.new_markdown_cell(
        f"**Exercise `{exercise}`: {points:g} point{'s' * (points != 1)}** "
        f"(of {total:g} in this lab; the grader checks {_CHECKED[spec.kind]}).")
    cell.metadata["allreduce"] = {"exercise": exercise, "role": "points"}
    cell.id = f"points-{exercise}"[:64]  # the same copy every time it is written
    return cell


def is_student_copy(nb) -> bool:
    """Whether ``nb`` is a student copy already (the labs of the published ``student``
    branch are): it shows points and none of its solution cells holds a solution region."""
    marks = [(role(cell), cell.source) for cell in nb.cells if role(cell)]
    return (any(mark[1] == "points" for mark, _ in marks)
            and not any(mark[1] == "solution" and BEGIN in source for mark, source in marks))


#: The mark :func:`student_copy` gives the lab's own unmarked code cells, so that ``--self``,
#: which reads a lab's imports and definitions from the student's notebook, reads them from
#: those cells only, as the instructor's grading reads them from the key: a helper defined in
#: a cell the student added passed ``--self`` and failed the real grading with a NameError.
LAB_CELL = {"role": "lab"}


def _is_lab_cell(cell) -> bool:
    metadata = cell.get("metadata", {})
    mark = metadata.get("allreduce") if isinstance(metadata, dict) else None
    return isinstance(mark, dict) and mark.get("role") == LAB_CELL["role"] and (
        "exercise" not in mark)


def student_copy(nb):
    """A copy of the instructor lab ``nb`` with every solution region stubbed out and each
    exercise's points shown in a cell just before its first solution cell; a lab that is
    a student copy already is copied as it is."""
    if is_student_copy(nb):
        return copy.deepcopy(nb)
    student = copy.deepcopy(nb)
    graded = {s.exercise: s for s in specs(nb)}
    total, shown, cells = sum(s.points for s in graded.values()), set(), []
    for cell in student.cells:
        mark = role(cell)
        if mark and mark[1] == "solution":
            if BEGIN not in cell.source:
                raise ValueError(f"solution cell of exercise {mark[0]!r} has no {BEGIN}")
            cell.source = stub_solutions(cell.source, mark[0])
            cell.outputs, cell.execution_count = [], None
            if mark[0] not in shown and mark[0] in graded:
                shown.add(mark[0])
                cells.append(_points_cell(graded[mark[0]], total))
        elif not mark and cell.cell_type == "code":
            cell.metadata["allreduce"] = dict(LAB_CELL)
        cells.append(cell)
    student.cells = cells
    return student


@dataclass(frozen=True)
class Written:
    """What :func:`write_student_copies` did with one lab: ``"wrote"`` a new copy, ``"kept"``
    the copy already there (the student's work), or ``"replaced"`` it after moving it to
    ``moved``."""

    path: Path
    action: str
    moved: Path | None = None


def write_student_copies(labs: list[Path], folder: Path, *, force: bool = False,
                         stamp: str | None = None) -> list[Written]:
    """Write the student copy of each lab into ``folder``, only where none is there yet: a
    copy already in ``folder`` is the student's work and is kept.  With ``force``, it is
    moved to ``folder/.old/STAMP/`` (a timestamp) first and a fresh copy written."""
    import time

    copies = []
    for lab in labs:  # every lab is read and checked before anything is written or moved
        nb = nbformat().read(lab, as_version=4)
        if not exercises(nb):
            raise ValueError(f"{lab} has no exercises (no check cells)")
        copies.append((folder / lab.name, student_copy(nb)))
    folder.mkdir(parents=True, exist_ok=True)
    stamp = stamp or time.strftime("%Y-%m-%dT%H-%M-%S")
    done = []
    for target, nb in copies:
        moved = None
        if target.exists():
            if not force:
                done.append(Written(target, "kept"))
                continue
            moved = folder / ".old" / stamp / target.name
            moved.parent.mkdir(parents=True, exist_ok=True)
            if moved.exists():
                raise FileExistsError(f"{moved} exists already: nothing was moved")
            target.rename(moved)
        nbformat().write(nb, target)
        done.append(Written(target, "replaced" if moved else "wrote", moved))
    return done
