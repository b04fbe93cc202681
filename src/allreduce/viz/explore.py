"""The book's interactive explorers: the cost model in the page, from the library's formulas.

At build time (a Sphinx extension, :func:`setup`, registered in ``_config.yml``) this module
writes one script, ``_static/allreduce_explore.js``, that every page loads:

* each algorithm's :class:`~allreduce.cost.Formula` expressions (``cost.FORMULAS``) and the
  two-level :class:`~allreduce.cost.Levels` (``cost.LEVELS``), translated from the same
  Python text the model evaluates and the chapters render (:func:`js_expression`);
* the functions that are Python code rather than expressions, ported by hand in one place,
  ``explore_cost.js`` (its header lists them); the browser tests compare each with Python;
* the data the explorers need (presets, the stepper's traces of the library's code);
* the explorers themselves (``explore_ui.js``): plain SVG, labelled controls, a text readout.

A chapter places an explorer with :func:`explorer` in a hidden-input cell; without
JavaScript the element stays hidden and the chapter's static figure is what the reader sees.
``window.allreduceCost.time`` / ``.terms`` equal :meth:`allreduce.cost.Model.time` /
:func:`allreduce.cost.terms` (tests/browser/test_explorers.py checks both, and each explorer).
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

HERE = Path(__file__).parent
SCRIPT = "allreduce_explore.js"
STYLE = "allreduce_explore.css"
KINDS = ("choose", "two-level", "sparse", "scaling", "stepper")

#: The names a formula may use (``Formula._names``) and what they become in JavaScript: the
#: names are fields of the object ``v``; lg and clg are hand-ported helpers.
_FUNCTIONS = {"lg": "H.lg", "clg": "H.clg", "ceiling": "Math.ceil"}
_BINARY = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.Mod: "%",
           ast.BitAnd: "&", ast.BitOr: "|"}
_COMPARE = {ast.Eq: "===", ast.NotEq: "!==", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">",
            ast.GtE: ">="}


def js_expression(text: str) -> str:
    """A formula's Python expression as a JavaScript expression over ``v`` (the names) and
    ``H`` (the helpers), operator for operator, so that it evaluates in the same order.
    Only what formulas use is accepted: arithmetic, comparisons, ``and``/``or``/``not``,
    the helpers, names and numbers; anything else raises ``ValueError``.  (Python's ``%``
    and ``//`` differ from JavaScript's on negative operands; formulas' operands are not
    negative.)"""
    def js(node) -> str:
        if isinstance(node, ast.Expression):
            return js(node.body)
        if isinstance(node, ast.BinOp):
            if isinstance(node.op, ast.FloorDiv):
                return f"Math.floor({js(node.left)} / {js(node.right)})"
            if isinstance(node.op, ast.Pow):
                return f"Math.pow({js(node.left)}, {js(node.right)})"
            if type(node.op) in _BINARY:
                return f"({js(node.left)} {_BINARY[type(node.op)]} {js(node.right)})"
        if isinstance(node, ast.UnaryOp):
            if isinstance(node.op, ast.USub):
                return f"(-{js(node.operand)})"
            if isinstance(node.op, ast.Not):
                return f"(!{js(node.operand)})"
        if isinstance(node, ast.BoolOp):
            joiner = " && " if isinstance(node.op, ast.And) else " || "
            return "(" + joiner.join(js(value) for value in node.values) + ")"
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _COMPARE:
            return f"({js(node.left)} {_COMPARE[type(node.ops[0])]} {js(node.comparators[0])})"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in _FUNCTIONS and not node.keywords:
            return f"{_FUNCTIONS[node.func.id]}({', '.join(js(a) for a in node.args)})"
        if isinstance(node, ast.Name) and node.id not in _FUNCTIONS:
            return f"v.{node.id}"
        if isinstance(node, ast.Constant) and type(node.value) in (int, float, bool):
            return ("true" if node.value else "false") if isinstance(node.value, bool) \
                else repr(node.value)
        raise ValueError(f"cannot translate {ast.dump(node)} in formula {text!r}")

    return js(ast.parse(text, mode="eval"))


def _formula_js(formula) -> str:
    """A :class:`~allreduce.cost.Formula` as a JavaScript object literal."""
    parts = [f"{field}: (v) => Number({js_expression(getattr(formula, field))})"
             for field in ("steps", "bytes", "reduced")]
    parts.append("constants: " + json.dumps(dict(formula.constants)))
    parts.append("options: [" + ", ".join(
        f"[{json.dumps(keyword)}, {json.dumps(symbol)}, (v) => {js_expression(default)}]"
        for keyword, symbol, default in formula.options) + "]")
    return "{" + ", ".join(parts) + "}"


def formulas_js() -> str:
    """``FORMULAS`` and ``LEVELS`` as JavaScript: every :class:`~allreduce.cost.Formula` in
    ``cost.FORMULAS`` translated, and the ones that are code (``hierarchical``) named in
    ``CODE`` for the hand-ported part to supply."""
    from .. import algorithms, cost  # noqa: F401  (algorithms registers the formulas)

    lines, code = ["const FORMULAS = {"], []
    for name, formula in cost.FORMULAS.items():
        if isinstance(formula, cost.Formula):
            lines.append(f"  {json.dumps(name)}: {_formula_js(formula)},")
        else:
            code.append(name)
    lines += ["};", f"const CODE = {json.dumps(code)};", "const LEVELS = {"]
    for name, levels in cost.LEVELS.items():
        if isinstance(levels, cost.Levels):
            lines.append(f"  {json.dumps(name)}: {{intra: {_formula_js(levels.intra)}, "
                         f"inter: {_formula_js(levels.inter)}, "
                         f"exact: (v) => Boolean({js_expression(levels.exact)}), "
                         f"crossing: {_crossing_js(levels)}}},")
    # how many of a node's ranks cross at once (cost.card_sharers): the flat levels' default,
    # and the hierarchy's
    flat = cost.Levels.flat(cost.Formula("0", "0", "0"))
    lines += ["};", f"const FLAT_CROSSING = {_crossing_js(flat)};",
              f"const HIERARCHY_CROSSING = {_crossing_js(cost.FORMULAS['hierarchical'])};"]
    return "\n".join(lines)


def _crossing_js(levels) -> str:
    """A levels' ``crossing`` expression (``cost.Levels.crossing``, the ranks of a node that
    share its card in a step), or ``null`` where the library has none."""
    crossing = getattr(levels, "crossing", None)
    return "null" if crossing is None else f"(v) => Number({js_expression(crossing)})"


# -- the data the explorers show ---------------------------------------------------------------

#: The stepper's algorithms (chapters 40 and 50) and its ranks.
STEPPER_ALGORITHMS = ("tree", "recursive_doubling", "rabenseifner", "ring", "bidirectional_ring",
                      "torus")
STEPPER_RANKS = range(2, 9)


def stepper_trace(algorithm: str, p: int) -> dict:
    """One recorded run of the library's ``algorithm`` on ``p`` thread ranks, ``2p``
    elements each: its messages ``[step, source, dest, offset, count]`` and, per step, the
    number of ranks' contributions each element of each rank holds."""
    from . import record_states

    count = 2 * p
    trace, states = record_states(algorithm, p, count)
    held = [[[int(bits).bit_count() for bits in rank] for rank in step] for step in states]
    return {"count": count, "steps": int(trace.steps()),
            "messages": [[int(t), int(s), int(d), None if o is None else int(o), int(c)]
                         for t, s, d, o, c in trace.messages()],
            "held": held}


def presets() -> dict:
    """The networks the explorers start from: the model ``auto`` uses until a machine saves
    its own (fitted on the book's reference machine), and the book's two simulated
    networks, as α (s), link bandwidth (bytes/s), reduction rate (bytes/s) and overhead."""
    from .. import cost
    from ..algorithms.auto import DEFAULT_MODEL

    def of(model):
        return {"alpha": model.alpha, "bandwidth": 1 / model.beta,
                "reduction": 1 / model.gamma if model.gamma else 0.0,
                "overhead": model.overhead}

    named = {"this book's measured machine": of(DEFAULT_MODEL)}
    named |= {label: of(model) for label, model in cost.NETWORKS.items()}
    return named


def data() -> dict:
    from ..algorithms.auto import CANDIDATES
    from ..sparse.allgather import BRUCK_LIMIT
    from ..sparse.dense import ZERO_COUNT_BYTES
    from ..sparse.exchange import OVERHEAD_BYTES
    from ..sparse.vector import index_dtype
    from .style import OKABE_ITO

    return {
        "presets": presets(),
        "candidates": list(CANDIDATES),
        "colours": [c for c in OKABE_ITO if c not in ("#000000", "#F0E442")],
        "sparse": {"overhead_bytes": OVERHEAD_BYTES, "bruck_limit": BRUCK_LIMIT,
                   "zero_count_bytes": ZERO_COUNT_BYTES,
                   "index_bytes_below_2_31": int(index_dtype(1).itemsize),
                   "index_bytes_from_2_31": int(index_dtype(2**31).itemsize)},
        "stepper": {alg: {str(p): stepper_trace(alg, p) for p in STEPPER_RANKS}
                    for alg in STEPPER_ALGORITHMS},
    }


def script() -> str:
    """The whole of ``allreduce_explore.js``."""
    return "\n".join([
        "/* allreduce_explore.js: written by allreduce.viz.explore when the book is built.",
        "   Do not edit: the formulas come from allreduce.cost.FORMULAS, the hand-ported",
        "   functions from src/allreduce/viz/explore_cost.js. */",
        "(function () {", '"use strict";',
        formulas_js(),
        "const DATA = " + json.dumps(data(), separators=(",", ":")) + ";",
        (HERE / "explore_cost.js").read_text(),
        (HERE / "explore_ui.js").read_text(),
        "})();", ""])


def explorer(kind: str, **attributes):
    """The element a chapter places where an explorer goes (hidden until the script draws
    it, so that a page read without JavaScript shows only the static figure)."""
    from IPython.display import HTML

    if kind not in KINDS:
        raise ValueError(f"no explorer {kind!r}: one of {KINDS}")
    extra = "".join(f' data-{key.replace("_", "-")}="{value}"' for key, value in attributes.items())
    return HTML(f'<div class="allreduce-explorer" data-explorer="{kind}"{extra} hidden></div>')


# -- the Sphinx extension ---------------------------------------------------------------------

def _write_script(app, config) -> None:
    folder = Path(app.doctreedir).parent / "explore_static"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / SCRIPT).write_text(script())
    (folder / STYLE).write_text((HERE / "explore.css").read_text())
    config.html_static_path.append(str(folder))


def setup(app):
    app.connect("config-inited", _write_script)
    app.add_js_file(SCRIPT)
    app.add_css_file(STYLE)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
