"""The explorers tell the truth: in headless Chromium, each explorer of the built book
(``data-explorer``, drawn by ``_static/allreduce_explore.js``; :mod:`allreduce.viz.explore`)
is set to 50 seeded random points, and every number it shows (``data-value``) equals the
library's Python evaluation of the same thing, to 1e-9 relative (crossovers to 1e-6, looser
than the bisection's own 1e-9); its text is that value rounded; the algorithm it names is
``auto``'s choice under the same model.  Also: ``window.allreduceCost`` against
:mod:`allreduce.cost` for every algorithm in ``cost.FORMULAS`` (and every hand-ported
function), the keyboard alone moves every control, no console error, and the explorers work
from ``file://``.  A screenshot of each explorer goes to the screenshot index.
"""

from __future__ import annotations

import importlib
import json
import math
import random
from urllib.parse import urljoin

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from allreduce import algorithms, cost, scaling  # noqa: F401  (algorithms registers FORMULAS)
from allreduce.sparse import auto as sparse_auto
from allreduce.sparse import cost as sparse_cost
from allreduce.sparse import layout as sparse_layout

from .conftest import SCREENSHOTS, write_screenshot_index

auto_rule = importlib.import_module("allreduce.algorithms.auto")  # the package's name is the function

PAGES = {"choose": ["chapters/60_choosing"], "two-level": ["chapters/65_beyond_ring"],
         "sparse": ["chapters/75_sparse"], "scaling": ["chapters/80_capstone"],
         "stepper": ["chapters/40_tree_allreduce", "chapters/50_ring_allreduce"]}
TRIALS = 50
REL = 1e-9          # a formula evaluated in two languages: the same operations in one order
CROSSOVER_REL = 1e-6  # a bisection stopped at 1e-9 of its bracket, on either side

# every shown number of the explorer: {key: [data-value, data-format, text]}, its parameters
READ = """
const root = document.querySelector(`[data-explorer="${arguments[0]}"]`);
const values = {};
for (const node of root.querySelectorAll('[data-key]'))
  values[node.dataset.key] = [node.dataset.value, node.dataset.format, node.textContent];
return {values: values, params: JSON.parse(root.dataset.params || 'null'), hidden: root.hidden,
        svg: root.querySelectorAll('svg').length};
"""

# set controls by name (a range's value, a select's option) as a reader's input would
SET = """
const root = document.querySelector(`[data-explorer="${arguments[0]}"]`);
for (const [name, value] of arguments[1]) {
  const input = root.querySelector(`[data-control="${name}"]`);
  input.value = String(value);
  input.dispatchEvent(new Event(input.tagName === 'SELECT' ? 'change' : 'input'));
}
"""

CONTROLS = """
const root = document.querySelector(`[data-explorer="${arguments[0]}"]`);
return Array.from(root.querySelectorAll('[data-control]')).map(c => ({
  name: c.dataset.control, tag: c.tagName, min: Number(c.min), max: Number(c.max),
  step: Number(c.step), value: c.value, label: c.labels.length ? c.labels[0].textContent : '',
  options: c.tagName === 'SELECT' ? Array.from(c.options).map(o => o.value) : []}));
"""


def open_page(driver, url: str) -> None:
    driver.get_log("browser")
    driver.get(url)
    driver.execute_script("window.scrollTo(0, 0)")


def severe(driver) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def close(shown: float, expected: float, rel: float = REL) -> bool:
    return math.isclose(shown, expected, rel_tol=rel, abs_tol=0.0) or shown == expected


# -- the text beside each data-value is its rounding (explore_ui.js's FORMAT) --------------------

UNITS = {"time": [("s", 1), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9)],
         "bytes": [("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10), ("B", 1)],
         "rate": [("TB/s", 1e12), ("GB/s", 1e9), ("MB/s", 1e6)],
         "count": [("G", 1e9), ("M", 1e6), ("k", 1e3)]}


def _mantissa_ok(text: str, x: float) -> bool:
    """``text`` is ``x`` to three significant digits (whole numbers from 1,000)."""
    shown = float(text)
    if abs(x) >= 1000:
        return abs(shown - x) <= 0.5 + 1e-9 * abs(x)
    if x == 0:
        return shown == 0
    digits = len(text.lstrip("-").replace(".", "").lstrip("0").split("e")[0])
    place = 10 ** (math.floor(math.log10(abs(x))) - 2)
    return abs(shown - x) <= 0.5 * place * (1 + 1e-9) and digits == 3


def assert_rounded(key: str, value: str, fmt: str, text: str) -> None:
    if fmt == "text":
        assert text.strip(), f"{key}: no text"
        return
    x = float(value)
    if fmt == "integer":
        assert text == str(int(x)) and x == int(x), (key, value, text)
    elif fmt == "percent":
        assert text.endswith(" %") and _mantissa_ok(text[:-2], 100 * x), (key, value, text)
    elif fmt == "number":
        if x == 0 or not 1e-3 <= abs(x) < 1e4:
            assert text == "0" if x == 0 else math.isclose(float(text), x, rel_tol=5e-3), (key, value, text)
        else:
            assert _mantissa_ok(text, x), (key, value, text)
    else:
        number, unit = text.rsplit(" ", 1)
        units = UNITS[fmt]
        want = next(((u, size) for u, size in units if abs(x) >= size), units[-1])
        assert unit == want[0] and _mantissa_ok(number, x / want[1]), (key, value, text)


def check_all_text(values: dict) -> None:
    for key, (value, fmt, text) in values.items():
        assert_rounded(key, value, fmt, text)


def random_settings(rng: random.Random, controls: list[dict], skip=()) -> list[tuple[str, str]]:
    settings = []
    for c in controls:
        if c["name"] in skip:
            continue
        if c["tag"] == "SELECT":
            settings.append((c["name"], rng.choice(c["options"])))
        else:
            steps = round((c["max"] - c["min"]) / c["step"])
            settings.append((c["name"], repr(c["min"] + c["step"] * rng.randint(0, steps))))
    return settings


def model_of(params: dict) -> cost.Model:
    return cost.Model(params["alpha"], params["beta"], params["gamma"], params["overhead"])


# -- the formulas' file against the library --------------------------------------------------

@pytest.fixture(scope="module")
def site(chromium, book_site):
    return chromium, book_site


def _cases(rng: random.Random) -> list[dict]:
    cases = []
    for name in cost.FORMULAS:
        for _ in range(30):
            p = rng.randint(1, 300) if rng.random() < 0.7 else rng.choice([2**k for k in range(13)])
            n = rng.choice([float(rng.randint(0, 1 << 30)), rng.uniform(0, 2**36), float(p * 4096)])
            model = {"alpha": 10 ** rng.uniform(-8, -3), "beta": 10 ** -rng.uniform(8, 12),
                     "gamma": rng.choice([0.0, 10 ** -rng.uniform(8, 13)]),
                     "overhead": rng.choice([0.0, 10 ** rng.uniform(-7, -3)])}
            options = {}
            if name in ("parameter_server", "sharded_parameter_server") and rng.random() < 0.5:
                options["servers"] = rng.randint(1, max(1, p))
            if name == "hierarchical" or rng.random() < 0.3:
                options["ranks_per_node"] = rng.randint(1, p)
            if name == "hierarchical" and rng.random() < 0.7:
                options["inner"] = rng.choice([a for a in cost.FORMULAS if a != "hierarchical"])
            cases.append({"name": name, "p": p, "n": n, "model": model, "options": options,
                          "k": rng.randint(1, p), "shared": rng.random() < 0.5, "inter": {
                              "alpha": model["alpha"] * 10 ** rng.uniform(0, 2),
                              "beta": model["beta"] * 10 ** rng.uniform(0, 2),
                              "gamma": model["gamma"], "overhead": model["overhead"]}})
    return cases


API = """
const C = window.allreduceCost, out = [];
for (const c of arguments[0]) {
  const r = {};
  try {
    const t = C.terms(c.name, c.p, c.n, c.options);
    r.terms = [t.steps, t.bytes, t.reduced];
    r.time = C.time(c.name, c.p, c.n, c.model, c.options);
    const levelOptions = Object.assign({}, c.options); delete levelOptions.ranks_per_node;
    if (c.name === 'hierarchical') levelOptions.ranks_per_node = c.k;
    const [a, b] = C.levelTerms(c.name, c.p, c.n, c.k, levelOptions);
    r.levels = [a.steps, a.bytes, a.reduced, b.steps, b.bytes, b.reduced];
    r.network = C.networkTime(c.model, c.inter, c.k, c.name, c.p, c.n, levelOptions, c.shared);
    r.sharers = C.cardSharers(c.name, c.p, c.k);
  } catch (e) { r.error = String(e); }
  out.push(r);
}
return out;
"""


def test_cost_api_equals_the_library(site):
    """window.allreduceCost.time / terms / levelTerms / networkTime for every algorithm in
    cost.FORMULAS (30 seeded random cases each: p, n, α, β, γ, overhead and options)."""
    driver, (root, _) = site
    open_page(driver, urljoin(root, "chapters/60_choosing.html"))
    assert set(driver.execute_script("return window.allreduceCost.algorithms")) \
        | {"hierarchical"} == set(cost.FORMULAS)
    cases = _cases(random.Random(26))
    shown = driver.execute_script(API, cases)
    checked = 0
    for case, got in zip(cases, shown):
        name, p, n, options, k = case["name"], case["p"], case["n"], case["options"], case["k"]
        where = f"{name} p={p} n={n} {options}"
        assert "error" not in got, f"{where}: {got.get('error')}"
        t = cost.terms(name, p, n, **options)
        for a, b in zip(got["terms"], (t.steps, t.bytes, t.reduced)):
            assert close(a, b), (where, got["terms"], t)
        assert close(got["time"], model_of(case["model"]).time(name, p, n, **options)), where
        level_options = {key: v for key, v in options.items() if key != "ranks_per_node"}
        if name == "hierarchical":
            level_options["ranks_per_node"] = k
        intra, inter = cost.level_terms(name, p, n, k, **level_options)
        for a, b in zip(got["levels"], (*vars(intra).values(), *vars(inter).values())):
            assert close(a, b), (where, k, got["levels"], intra, inter)
        network = cost.Network(model_of(case["model"]), model_of(case["inter"]), k,
                               shared_card=case["shared"])
        assert close(got["network"], network.time(name, p, n, **level_options)), (where, k)
        assert got["sharers"] == cost.card_sharers(name, p, k), (where, k)
        checked += 1
    assert checked == len(cases) >= 30 * len(cost.FORMULAS)


HAND_PORTED = """
const C = window.allreduceCost, c = arguments[0];
return {
  grid: c.ps.map(p => C.grid(p)), power: c.ps.map(p => C.largestPowerOfTwo(p)),
  crossover: c.crossings.map(([m, a, b, p]) => C.crossover(m, a, b, p)),
  fastest: c.crossings.map(([m, a, b, p, n]) => C.fastest(n, p, m)),
  onNodes: c.nodes.map(([n, p, intra, inter, k]) => C.fastestOnNodes(n, p, intra, inter, k)),
  expected: c.sparse.map(([name, n, p, k, unions]) => {
    const t = C.expectedTerms(name, n, p, k, 4, unions); return [t.steps, t.bytes]; }),
  union: c.sparse.map(([name, n, p, k]) => C.sparseUnion(n, k / n, p)),
  step: c.steps.map(([p, o]) => { const s = C.step(p, o);
    return [s.algorithm, s.compute, s.communicate, s.exposed, s.seconds, s.ratio,
            C.weakEfficiency(p, o.samples, o), C.strongEfficiency(p, o.samples * 8, o)]; }),
};
"""


def test_every_hand_ported_function_equals_its_python(site):
    """grid, largest_power_of_two, the crossover bisection, auto's rules, the sparse
    expected terms and union, scaling.step and the efficiencies: 60 seeded cases each."""
    driver, (root, _) = site
    open_page(driver, urljoin(root, "chapters/60_choosing.html"))
    rng = random.Random(2026)
    names = list(auto_rule.CANDIDATES) + ["tree", "torus", "ring", "reduce_broadcast"]

    def model():
        return {"alpha": 10 ** rng.uniform(-7, -4), "beta": 10 ** -rng.uniform(8, 12),
                "gamma": 10 ** -rng.uniform(9, 13), "overhead": rng.choice([0.0, 5e-5])}

    cases = {
        "ps": list(range(1, 61)),
        "crossings": [[model(), *rng.sample(names, 2), rng.randint(2, 4096), rng.randint(1, 1 << 30)]
                      for _ in range(60)],
        "nodes": [[rng.randint(1, 1 << 28), rng.randint(2, 512), (m := model()),
                   {**m, "alpha": m["alpha"] * 3, "beta": m["beta"] * 10}, rng.randint(1, 16)]
                  for _ in range(60)],
        "sparse": [],
        "steps": [[rng.randint(1, 4096), {"gradient_bytes": 10 ** rng.uniform(3, 11),
                                          "sample_seconds": 10 ** rng.uniform(-5, -1),
                                          "samples": rng.randint(1, 128), "model": model(),
                                          "overlap": rng.choice([0.0, 2 / 3])}] for _ in range(60)],
    }
    for _ in range(60):
        name = rng.choice(["allgather", "sparse_ring", "sparse_direct", "sparse_recursive_doubling"])
        n, p = rng.randint(1000, 1 << 32), rng.randint(1, 64)
        k = n * 10 ** rng.uniform(-5, -0.5)
        unions = [sparse_layout.union(n, k / n, s) for s in range(p + 1)]
        cases["sparse"].append([name, n, p, k, unions])
    got = driver.execute_script(HAND_PORTED, cases)
    from allreduce.topology import grid

    assert [tuple(g) for g in got["grid"]] == [grid(p) for p in cases["ps"]]
    assert got["power"] == [cost.largest_power_of_two(p) for p in cases["ps"]]
    for (m, a, b, p, n), shown, best in zip(cases["crossings"], got["crossover"], got["fastest"]):
        expected = cost.crossover(model_of(m), a, b, p)
        assert (shown is None) == (expected is None), (a, b, p, shown, expected)
        if expected is not None:
            assert close(shown, expected, CROSSOVER_REL), (a, b, p, shown, expected)
        assert best == auto_rule.fastest(n, p, model_of(m))
    for (n, p, intra, inter, k), (name, options) in zip(cases["nodes"], got["onNodes"]):
        network = cost.Network(model_of(intra), model_of(inter), k)
        assert (name, options) == auto_rule.fastest_on_nodes(n, p, network), (n, p, k)
    for (name, n, p, k, unions), (steps, nbytes), union in zip(cases["sparse"], got["expected"],
                                                               got["union"]):
        t = sparse_cost.expected_terms(name, n, p, k, 4, lambda s, u=unions: u[s])
        assert steps == t.steps and close(nbytes, t.bytes), (name, n, p, k)
        assert close(union, sparse_layout.union(n, k / n, p))
    for (p, o), shown in zip(cases["steps"], got["step"]):
        options = {**o, "model": model_of(o["model"])}
        samples = options.pop("samples")
        s = scaling.step(p, samples=samples, **options)
        assert shown[0] == s.algorithm
        for a, b in zip(shown[1:6], (s.compute, s.communicate, s.exposed, s.seconds, s.ratio)):
            assert close(a, b), (p, o, shown, s)
        assert close(shown[6], scaling.weak_efficiency(p, batch=samples, **options))
        assert close(shown[7], scaling.strong_efficiency(p, global_batch=samples * 8, **options))


# -- each explorer at 50 random points ------------------------------------------------------

def _crossovers(values: dict) -> dict:
    return {tuple(key.split(":")[1:]): float(v[0]) for key, v in values.items()
            if key.startswith("crossover:")}


def _check_choose(values: dict, params: dict) -> None:
    model, p, nbytes = model_of(params), params["p"], params["nbytes"]
    times = {key.split(":", 1)[1]: float(v[0]) for key, v in values.items() if key.startswith("time:")}
    assert set(times) == set(cost.FORMULAS)
    for name, shown in times.items():
        assert close(shown, model.time(name, p, nbytes)), (name, params)
    assert values["winner"][0] == auto_rule.choose(nbytes, p, using=model), params
    assert float(values["p"][0]) == p and float(values["size"][0]) == nbytes
    expected = {(a, b): x for a in auto_rule.CANDIDATES for b in auto_rule.CANDIDATES if a != b
                if (x := cost.crossover(model, a, b, p)) is not None}
    shown = _crossovers(values)
    assert set(shown) == set(expected), (shown, expected, params)
    for pair, x in expected.items():
        assert close(shown[pair], x, CROSSOVER_REL), (pair, shown[pair], x, params)


def _check_two_level(values: dict, params: dict) -> None:
    p, n, k = params["p"], params["nbytes"], params["ranks_per_node"]
    if p < 2:
        return
    network = cost.Network(model_of(params["intra"]), model_of(params["inter"]), k,
                           shared_card=params["shared_card"])
    options = {"hierarchical": {"ranks_per_node": k, "inner": "ring"}}

    def time(name, x):
        return network.time(name, p, x, **options.get(name, {}))

    times = {name: time(name, n) for name in ("ring", "hierarchical", "torus")}
    for name, t in times.items():
        assert close(float(values[f"time:{name}"][0]), t), (name, params)
    assert values["winner"][0] == min(times, key=times.get)
    expected = {(a, b): x for a in times for b in times if a != b
                if (x := cost.crossing(lambda m, a=a: time(a, m), lambda m, b=b: time(b, m)))
                is not None}
    shown = _crossovers(values)
    assert set(shown) == set(expected), (shown, expected, params)
    for pair, x in expected.items():
        assert close(shown[pair], x, CROSSOVER_REL), (pair, params)


def _sparse_times(density: float, params: dict) -> dict:
    p, n, overlap, itemsize = params["p"], params["n"], params["overlap"], params["itemsize"]
    model, k = model_of(params["model"]), density * n
    unions = [sparse_layout.union(n, density, s) if overlap == "independent"
              else (k if s else 0) if overlap == "identical" else min(s * k, n)
              for s in range(p + 1)]
    size, count = n * itemsize, sparse_auto.ZERO_COUNT_BYTES
    times = {"dense": model.time(auto_rule.fastest(size, p, model), p, size)
             + model.time(auto_rule.fastest(count, p, model), p, count)}
    for name in ("allgather", "sparse_ring"):
        t = sparse_cost.expected_terms(name, n, p, k, itemsize, lambda s: unions[s])
        times[name] = model.overhead + t.steps * model.alpha + t.bytes * model.beta
    return times


def _check_sparse(values: dict, params: dict) -> None:
    times = _sparse_times(params["density"], params)
    for name, t in times.items():
        assert close(float(values[f"time:{name}"][0]), t), (name, params)
    assert values["winner"][0] == min(times, key=times.get)
    expected = {}
    for a in times:
        for b in times:
            x = a != b and cost.crossing(lambda v, a=a: _sparse_times(1 / v, params)[a],
                                         lambda v, b=b: _sparse_times(1 / v, params)[b],
                                         largest=1e5)
            if x:
                expected[a, b] = 1 / x
    shown = _crossovers(values)
    assert set(shown) == set(expected), (shown, expected, params)
    for pair, x in expected.items():
        assert close(shown[pair], x, CROSSOVER_REL), (pair, params)


def _check_scaling(values: dict, params: dict) -> None:
    options = {"gradient_bytes": params["gradient_bytes"], "sample_seconds": params["sample_seconds"],
               "model": model_of(params["model"]), "overlap": params["overlap"]}
    p = params["p"]
    s = scaling.step(p, samples=params["batch"], **options)
    for key, x in (("step", s.seconds), ("compute", s.compute), ("communicate", s.communicate),
                   ("exposed", s.exposed), ("ratio", s.ratio),
                   ("weak", scaling.weak_efficiency(p, batch=params["batch"], **options)),
                   ("strong", scaling.strong_efficiency(p, global_batch=params["global_batch"],
                                                        **options))):
        assert close(float(values[key][0]), x), (key, params)
    assert values["algorithm"][0] == s.algorithm == auto_rule.fastest(
        params["gradient_bytes"], p, options["model"])


_TRACES: dict = {}


def _check_stepper(values: dict, params: dict) -> None:
    from allreduce.viz import record_states

    key = params["algorithm"], params["p"]
    if key not in _TRACES:
        _TRACES[key] = record_states(params["algorithm"], params["p"], 2 * params["p"])[0]
    trace, step = _TRACES[key], params["step"]
    if step == 0:
        assert "messages" not in values
        return
    moving = [m for m in trace.messages() if m[0] == step]
    assert int(values["messages"][0]) == len(moving), (params, values)
    assert int(values["elements"][0]) == sum(m[4] for m in moving), params
    assert int(values["steps"][0]) == trace.steps()


CHECKS = {"choose": _check_choose, "two-level": _check_two_level, "sparse": _check_sparse,
          "scaling": _check_scaling, "stepper": _check_stepper}


@pytest.mark.parametrize("kind", list(PAGES))
def test_explorer_shows_the_library_s_numbers(site, kind):
    driver, (root, _) = site
    page = PAGES[kind][0]
    open_page(driver, urljoin(root, f"{page}.html"))
    first = driver.execute_script(READ, kind)
    assert not first["hidden"] and first["svg"] >= 1, f"{kind}: not drawn on {page}"
    controls = driver.execute_script(CONTROLS, kind)
    assert controls and all(c["label"].strip() for c in controls), controls
    rng = random.Random(f"explorer {kind}")
    checked = 0
    for trial in range(TRIALS):
        skip = ()
        if kind == "choose" and trial % 2 == 0:  # a preset, then only p and the size
            skip = ("alpha", "bandwidth", "reduction", "overhead")
        if kind == "stepper":  # the step last: its range depends on the algorithm and p
            settings = random_settings(rng, controls, skip=("step",))
            driver.execute_script(SET, kind, settings)
            steps = driver.execute_script(CONTROLS, kind)[-1]
            settings = [("step", str(rng.randint(0, int(steps["max"]))))]
        else:
            settings = random_settings(rng, controls, skip=skip)
        driver.execute_script(SET, kind, settings)
        shown = driver.execute_script(READ, kind)
        check_all_text(shown["values"])
        CHECKS[kind](shown["values"], shown["params"])
        if kind == "choose" and skip:
            preset = dict(settings)["preset"]
            if preset == "this book's measured machine":  # the preset is auto's own model
                model = auto_rule.DEFAULT_MODEL
                for name in ("alpha", "beta", "gamma", "overhead"):
                    assert close(shown["params"][name], getattr(model, name), 1e-15)
        checked += 1
    assert checked == TRIALS
    assert not severe(driver), severe(driver)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    element = driver.find_element(By.CSS_SELECTOR, f'[data-explorer="{kind}"]')
    size = driver.get_window_size()  # a window tall enough for the whole explorer
    driver.set_window_size(size["width"], max(size["height"], element.size["height"] + 300))
    driver.execute_script("arguments[0].scrollIntoView()", element)
    (SCREENSHOTS / f"explorer__{kind}.png").write_bytes(element.screenshot_as_png)
    driver.set_window_size(size["width"], size["height"])
    write_screenshot_index()


@pytest.mark.parametrize("kind", list(PAGES))
def test_keyboard_alone_moves_every_control(site, kind):
    """Tab reaches each control in turn, and an arrow key changes it and what is shown."""
    driver, (root, _) = site
    for page in PAGES[kind]:
        open_page(driver, urljoin(root, f"{page}.html"))
        controls = driver.execute_script(CONTROLS, kind)
        first = driver.find_element(By.CSS_SELECTOR, f'[data-explorer="{kind}"] [data-control]')
        driver.execute_script("arguments[0].focus()", first)
        for i, control in enumerate(controls):
            if i:
                driver.switch_to.active_element.send_keys(Keys.TAB)
            active = driver.switch_to.active_element
            assert active.get_attribute("data-control") == control["name"], (kind, i, control)
            before = driver.execute_script(READ, kind)
            value = active.get_attribute("value")
            if control["tag"] == "SELECT":
                key = Keys.ARROW_UP if control["options"].index(value) == len(control["options"]) - 1 \
                    else Keys.ARROW_DOWN
            else:
                key = Keys.ARROW_LEFT if float(value) >= control["max"] else Keys.ARROW_RIGHT
            active.send_keys(key)
            after = driver.execute_script(READ, kind)
            assert active.get_attribute("value") != value, (kind, control["name"])
            assert (after["params"], after["values"]) != (before["params"], before["values"]), \
                (kind, control["name"])
        assert not severe(driver), severe(driver)


def test_explorers_work_from_file(site):
    """Opened as files (file://, no server), every explorer is drawn with no console error."""
    driver, (_, folder) = site
    for kind, pages in PAGES.items():
        for page in pages:
            open_page(driver, (folder / f"{page}.html").resolve().as_uri())
            shown = driver.execute_script(READ, kind)
            assert not shown["hidden"] and shown["svg"] >= 1 and shown["values"], (kind, page)
            assert driver.execute_script("return typeof window.allreduceCost.time") == "function"
            assert not severe(driver), (page, severe(driver))


def test_the_formulas_file_is_translated_from_cost_formulas(book_site):
    """Every Formula of cost.FORMULAS is in the built script, and nothing else of it is
    hand-written but the functions the script's hand-ported section lists."""
    from allreduce.viz import explore

    _, folder = book_site
    text = (folder / "_static" / explore.SCRIPT).read_text()
    for name, formula in cost.FORMULAS.items():
        if isinstance(formula, cost.Formula):
            assert f'"{name}": {{steps: (v) => Number({explore.js_expression(formula.steps)})' in text
    assert "HAND-PORTED FROM PYTHON" in text
    assert json.loads(text.split("const CODE = ", 1)[1].split(";", 1)[0]) == ["hierarchical"]
