"""The explorers' script without a browser: :func:`allreduce.viz.explore.js_expression`
translates what formulas use and refuses the rest, and the script
(:func:`allreduce.viz.explore.script`), run in Node.js where there is one, gives
``allreduceCost.time`` and ``.terms`` equal to the library's for every algorithm in
``cost.FORMULAS`` (the browser tests, tests/browser/test_explorers.py, check the same in the
built book, with every hand-ported function and every explorer)."""

from __future__ import annotations

import json
import math
import random
import shutil
import subprocess

import pytest

from allreduce import algorithms, cost  # noqa: F401  (registers the formulas)
from allreduce.viz import explore


def test_translation_keeps_python_s_order_and_meaning():
    assert explore.js_expression("2*(p - 1)/p*n") == "(((2 * (v.p - 1)) / v.p) * v.n)"
    assert explore.js_expression("(not (N == 1 or k % C == 0))*(lg(q))") == \
        "((!((v.N === 1) || ((v.k % v.C) === 0))) * H.lg(v.q))"
    assert explore.js_expression("ceiling(n/(p*B)) + clg(p) + n//2") == \
        "((Math.ceil((v.n / (v.p * v.B))) + H.clg(v.p)) + Math.floor(v.n / 2))"
    for bad in ("__import__('os')", "p if n else q", "sqrt(p)", "a.b", "'text'", "p < q < n"):
        with pytest.raises(ValueError):
            explore.js_expression(bad)


RUN = """
global.window = {}; global.document = {readyState: "complete", querySelectorAll: () => []};
require(process.argv[2]);
const cases = JSON.parse(require("fs").readFileSync(0, "utf8"));
console.log(JSON.stringify(cases.map((c) => {
  const t = window.allreduceCost.terms(c.name, c.p, c.n, c.options);
  return [t.steps, t.bytes, t.reduced, window.allreduceCost.time(c.name, c.p, c.n, c.model, c.options)];
})));
"""


def test_script_in_node_equals_the_library(tmp_path):
    node = shutil.which("node") or shutil.which("nodejs")
    if node is None:
        pytest.skip("no Node.js here: tests/browser/test_explorers.py checks the same in Chromium")
    script = tmp_path / "allreduce_explore.js"
    script.write_text(explore.script())
    runner = tmp_path / "run.js"
    runner.write_text(RUN)
    rng = random.Random(26)
    cases = []
    for name in cost.FORMULAS:
        for _ in range(20):
            p = rng.randint(1, 5000)
            options = {"ranks_per_node": rng.randint(1, p)} if name == "hierarchical" else {}
            cases.append({"name": name, "p": p, "n": rng.uniform(0, 2**34), "options": options,
                          "model": {"alpha": rng.uniform(1e-7, 1e-4), "beta": rng.uniform(1e-12, 1e-9),
                                    "gamma": rng.uniform(0, 1e-10), "overhead": rng.uniform(0, 1e-4)}})
    run = subprocess.run([node, str(runner), str(script)], input=json.dumps(cases),
                         capture_output=True, text=True, timeout=60, check=False)
    assert run.returncode == 0, run.stderr
    shown = json.loads(run.stdout)
    assert len(shown) == len(cases)
    for case, (steps, nbytes, reduced, seconds) in zip(cases, shown):
        t = cost.terms(case["name"], case["p"], case["n"], **case["options"])
        model = cost.Model(**case["model"])
        for a, b in ((steps, t.steps), (nbytes, t.bytes), (reduced, t.reduced),
                     (seconds, model.time(case["name"], case["p"], case["n"], **case["options"]))):
            assert math.isclose(a, b, rel_tol=1e-9, abs_tol=0.0) or a == b, (case, a, b)
