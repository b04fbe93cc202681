/* ==== HAND-PORTED FROM PYTHON: the one place where the library's code is re-written ====
   The formulas above (FORMULAS, LEVELS) are translated from allreduce.cost.FORMULAS and
   allreduce.cost.LEVELS by allreduce.viz.explore.js_expression.  What is Python code, not an
   expression, is ported here by hand; tests/browser/test_explorers.py compares each
   function through window.allreduceCost with the Python it ports:

     H.lg, H.clg              allreduce.cost._lg, _clg
     largestPowerOfTwo        allreduce.cost.largest_power_of_two
     grid                     allreduce.topology.grid
     layoutShape              allreduce.topology.Layout.per_node / .of (largest, nodes, smallest)
     names                    allreduce.cost.Formula._names
     formulaTerms             allreduce.cost.Formula.terms
     hierarchicalSplit        allreduce.algorithms.hierarchical.Hierarchy.split / .terms
     terms                    allreduce.cost.terms
     modelTime                allreduce.cost.Model.time / predict
     levelTerms               allreduce.cost.level_terms (Levels.split, .flat, .is_exact)
     cardSharers              allreduce.cost.card_sharers
     networkTime              allreduce.cost.Network.time (and its __post_init__ checks,
                              and shared_card)
     crossing, crossover      allreduce.cost.crossing, crossover (the bisection)
     fastest, fastestOnNodes  allreduce.algorithms.auto.fastest, fastest_on_nodes
     sparseUnion              allreduce.sparse.layout.union
     expectedTerms            allreduce.sparse.cost.expected_terms (with vector.index_dtype)
     step, weakEfficiency, strongEfficiency   allreduce.scaling.step, weak_efficiency,
                                              strong_efficiency
*/
const H = {
  lg: (p) => Math.log2(p),
  clg: (p) => (p > 1 ? Math.ceil(Math.log2(p)) : 0),
};

function largestPowerOfTwo(p) {
  let q = 1;
  while (q * 2 <= p) q *= 2;
  return q;
}

function grid(p) {
  if (p < 1) throw new RangeError("a grid needs at least one rank, got " + p);
  let rows = 1;
  for (let d = 1; d * d <= p; d++) if (p % d === 0) rows = d;
  return [rows, p / rows];
}

function layoutShape(p, ranksPerNode, nodes) {
  // [largest, nodes, smallest] of Layout.of(nodes) or Layout.per_node(p, ranksPerNode)
  const ids = nodes ? nodes : Array.from({length: p}, (_, r) => Math.floor(r / ranksPerNode));
  const count = new Map();
  for (const id of ids) count.set(id, (count.get(id) || 0) + 1);
  const sizes = Array.from(count.values());
  return [Math.max(...sizes), sizes.length, Math.min(...sizes)];
}

function names(formula, p, n, given) {
  given = Object.assign({}, given);
  const q = largestPowerOfTwo(p);
  const k = Math.min(given.ranks_per_node || p, p);
  delete given.ranks_per_node;
  const nodes = Math.ceil(p / k);
  const [rows, columns] = grid(p);
  const v = Object.assign({p: p, n: n, q: q, f: p !== q ? 1 : 0, k: k, N: nodes,
                           s: p - (nodes - 1) * k, R: rows, C: columns}, formula.constants);
  for (const [keyword, symbol, fallback] of formula.options) {
    const value = given[keyword];
    delete given[keyword];
    v[symbol] = value === undefined || value === null ? fallback(v) : value;
  }
  const unknown = Object.keys(given).filter((key) => given[key] !== undefined);
  if (unknown.length) throw new TypeError("unknown cost options " + unknown.sort().join(", "));
  return v;
}

function formulaTerms(formula, p, n, options) {
  const v = names(formula, p, n, options || {});
  return {steps: formula.steps(v), bytes: formula.bytes(v), reduced: formula.reduced(v)};
}

const ZERO = {steps: 0, bytes: 0, reduced: 0};
const add = (a, b) => ({steps: a.steps + b.steps, bytes: a.bytes + b.bytes,
                        reduced: a.reduced + b.reduced});

function hierarchicalSplit(p, n, k, options) {
  const o = Object.assign({}, options || {});
  const inner = o.inner === undefined ? "ring" : o.inner;
  const unknown = Object.keys(o).filter((key) => !["ranks_per_node", "nodes", "inner"].includes(key));
  if (unknown.length) throw new TypeError("unexpected options " + unknown.join(", "));
  const [largest, count, smallest] = layoutShape(p, o.ranks_per_node || k || p, o.nodes);
  if (!(inner in FORMULAS) || inner === "hierarchical")
    throw new Error("no cost formula for the inner algorithm " + inner);
  const K = largest, s = smallest;
  const local = {steps: 2 * (K - 1), bytes: 2 * (K - 1) / s * n, reduced: (K - 1) / s * n};
  return [local, formulaTerms(FORMULAS[inner], count, n / smallest, {})];
}

function terms(algorithm, p, n, options) {
  if (algorithm === "hierarchical") {
    const [inside, between] = hierarchicalSplit(p, n, null, options);
    return add(inside, between);
  }
  if (!(algorithm in FORMULAS)) throw new Error("no cost formula for algorithm " + algorithm);
  return formulaTerms(FORMULAS[algorithm], p, n, options);
}

function modelTime(model, algorithm, p, nbytes, options) {
  const t = terms(algorithm, p, nbytes, options);
  return t.steps * model.alpha + t.bytes * model.beta + t.reduced * (model.gamma || 0)
    + (model.overhead || 0);
}

function flatLevels(formula) {
  const where = (condition) => ({
    steps: (v) => condition(v) * formula.steps(v), bytes: (v) => condition(v) * formula.bytes(v),
    reduced: (v) => condition(v) * formula.reduced(v),
    constants: formula.constants, options: formula.options});
  return {intra: where((v) => Number(v.N === 1)), inter: where((v) => Number(v.N > 1)),
          exact: (v) => v.N === 1};
}

function levelTerms(algorithm, p, n, k, options) {
  if (algorithm === "hierarchical") return hierarchicalSplit(p, n, k, options);
  if (!(algorithm in FORMULAS)) throw new Error("no cost formula for algorithm " + algorithm);
  const whole = FORMULAS[algorithm];
  const levels = LEVELS[algorithm] || flatLevels(whole);
  const withK = Object.assign({}, options || {}, {ranks_per_node: k});
  const exact = levels.exact(names(levels.intra, p, 0.0, {ranks_per_node: k}));
  if (exact) return [formulaTerms(levels.intra, p, n, withK), formulaTerms(levels.inter, p, n, withK)];
  return [ZERO, formulaTerms(whole, p, n, options)];
}

function checkNetwork(network) {
  if (network.inter.alpha < network.intra.alpha || network.inter.beta < network.intra.beta)
    throw new RangeError("the links between nodes must be no faster than those inside one");
  if (network.ranks_per_node < 1)
    throw new RangeError("ranks_per_node must be at least 1, got " + network.ranks_per_node);
}

function cardSharers(algorithm, p, k) {
  if (!(algorithm in FORMULAS) && algorithm !== "hierarchical")
    throw new Error("no cost formula for algorithm " + algorithm);
  const crossing = algorithm === "hierarchical" ? HIERARCHY_CROSSING
    : (LEVELS[algorithm] || {crossing: FLAT_CROSSING}).crossing;
  if (crossing === null) throw new Error("this library's cost.Network has no shared card");
  const v = names({constants: {}, options: []}, p, 0.0, {ranks_per_node: k});
  return Math.max(1, Math.min(Math.trunc(crossing(v)), v.k));
}

function networkTime(network, algorithm, p, nbytes, options) {
  checkNetwork(network);
  const [intra, inter] = levelTerms(algorithm, p, nbytes, network.ranks_per_node, options);
  const a = network.intra, b = network.inter;
  const sharers = network.shared_card ? cardSharers(algorithm, p, network.ranks_per_node) : 1;
  return intra.steps * a.alpha + intra.bytes * a.beta + inter.steps * b.alpha
    + inter.bytes * sharers * b.beta + (intra.reduced + inter.reduced) * (a.gamma || 0)
    + (a.overhead || 0);
}

function crossing(first, second, largest) {
  largest = largest === undefined ? Math.pow(2, 50) : largest;
  const gap = (n) => first(n) - second(n);
  let lo = 1.0, hi = largest;
  if (gap(lo) >= 0 || gap(hi) <= 0) return null;
  while (hi - lo > 1e-9 * hi) {
    const mid = (lo + hi) / 2;
    if (gap(mid) < 0) lo = mid; else hi = mid;
  }
  return (lo + hi) / 2;
}

function crossover(model, first, second, p, options, largest) {
  const time = model.ranks_per_node !== undefined
    ? (name, n) => networkTime(model, name, p, n, options)
    : (name, n) => modelTime(model, name, p, n, options);
  return crossing((n) => time(first, n), (n) => time(second, n), largest);
}

function fastest(nbytes, size, model) {
  let best = null, bestTime = Infinity;
  for (const name of DATA.candidates) {
    const t = modelTime(model, name, size, nbytes);
    if (t < bestTime) { best = name; bestTime = t; }
  }
  return best;
}

function fastestOnNodes(nbytes, size, network) {
  const [, nodes, smallest] = layoutShape(size, network.ranks_per_node);
  const inner = fastest(-Math.floor(-nbytes / smallest), nodes, network.inter);
  const options = {hierarchical: {ranks_per_node: network.ranks_per_node, inner: inner}};
  let best = null, bestTime = Infinity;
  for (const name of [...DATA.candidates, "hierarchical"]) {
    const t = networkTime(network, name, size, nbytes, options[name] || {});
    if (t < bestTime) { best = name; bestTime = t; }
  }
  return [best, options[best] || {}];
}

function sparseUnion(n, density, ranks) {
  return n * (1 - Math.pow(1 - Math.min(density, 1.0), ranks));
}

function expectedTerms(algorithm, n, p, k, itemsize, unions) {
  if (p === 1) return {steps: 0, bytes: 0, reduced: 0};
  const chunk = n / p;
  const index = Math.trunc(n) < Math.pow(2, 31) ? DATA.sparse.index_bytes_below_2_31
    : DATA.sparse.index_bytes_from_2_31;
  const message = (pairs, width) => DATA.sparse.overhead_bytes
    + Math.min(pairs * (index + itemsize), width * itemsize + width / 8);
  const repeat = (x, times) => Array.from({length: times}, () => x);
  const gather = repeat(message(unions(p) / p, chunk), p - 1);
  let sizes;
  if (algorithm === "allgather") {
    // Bruck's all-gather while the p blocks take less than the limit at most (allgather.uses_bruck)
    const bound = Math.min(p * (DATA.sparse.overhead_bytes + n * itemsize + Math.ceil(n / 8)),
                           p * DATA.sparse.overhead_bytes + p * k * (index + itemsize));
    sizes = [];
    if (bound < DATA.sparse.bruck_limit)
      for (let d = 1; d < p; d *= 2) sizes.push(Math.min(d, p - d) * message(k, n));
    else sizes = repeat(message(k, n), p - 1);
  }
  else if (algorithm === "sparse_ring")
    sizes = [...Array.from({length: p - 1}, (_, i) => message(unions(i + 1) / p, chunk)), ...gather];
  else if (algorithm === "sparse_direct") sizes = [...repeat(message(k / p, chunk), p - 1), ...gather];
  else if (algorithm === "sparse_recursive_doubling") {
    const q = largestPowerOfTwo(p);
    sizes = [];
    for (let j = 0; (1 << j) < q; j++) sizes.push(message(unions(1 << j), n));
    if (q !== p) sizes = [message(k, n), ...sizes, message(unions(p), n)];
  } else throw new Error("no expected terms for sparse algorithm " + algorithm);
  return {steps: sizes.length, bytes: sizes.reduce((a, b) => a + b, 0), reduced: 0};
}

function step(p, o) {
  const compute = o.samples * o.sample_seconds;
  if (p === 1) return {ranks: 1, algorithm: "", compute: compute, communicate: 0.0, exposed: 0.0,
                       seconds: compute + 0.0, ratio: 0.0 / compute};
  const algorithm = fastest(o.gradient_bytes, p, o.model);
  const communicate = modelTime(o.model, algorithm, p, o.gradient_bytes);
  const exposed = Math.max(0.0, communicate - (o.overlap || 0) * compute);
  return {ranks: p, algorithm: algorithm, compute: compute, communicate: communicate,
          exposed: exposed, seconds: compute + exposed, ratio: communicate / compute};
}

function weakEfficiency(p, batch, o) {
  return step(1, Object.assign({}, o, {samples: batch})).seconds
    / step(p, Object.assign({}, o, {samples: batch})).seconds;
}

function strongEfficiency(p, globalBatch, o) {
  const one = step(1, Object.assign({}, o, {samples: globalBatch})).seconds;
  return one / (p * step(p, Object.assign({}, o, {samples: globalBatch / p})).seconds);
}
/* ==== end of the hand-ported functions ==== */

const modelOf = (m) => ({alpha: m.alpha, beta: m.beta, gamma: m.gamma || 0,
                         overhead: m.overhead || 0});

window.allreduceCost = {
  algorithms: Object.keys(FORMULAS),
  time: (algorithm, p, nbytes, model, options) =>
    modelTime(modelOf(model), algorithm, p, nbytes, options || {}),
  terms: (algorithm, p, n, options) => terms(algorithm, p, n, options || {}),
  levelTerms: (algorithm, p, n, k, options) => levelTerms(algorithm, p, n, k, options || {}),
  networkTime: (intra, inter, ranksPerNode, algorithm, p, nbytes, options, sharedCard) =>
    networkTime({intra: modelOf(intra), inter: modelOf(inter), ranks_per_node: ranksPerNode,
                 shared_card: Boolean(sharedCard)}, algorithm, p, nbytes, options || {}),
  cardSharers: cardSharers,
  crossover: (model, first, second, p, options) =>
    crossover(modelOf(model), first, second, p, options || {}),
  fastest: (nbytes, p, model) => fastest(nbytes, p, modelOf(model)),
  fastestOnNodes: (nbytes, p, intra, inter, ranksPerNode) =>
    fastestOnNodes(nbytes, p, {intra: modelOf(intra), inter: modelOf(inter),
                               ranks_per_node: ranksPerNode}),
  grid: grid,
  largestPowerOfTwo: largestPowerOfTwo,
  expectedTerms: (algorithm, n, p, k, itemsize, unions) =>
    expectedTerms(algorithm, n, p, k, itemsize, (s) => unions[s]),
  sparseUnion: sparseUnion,
  step: (p, o) => step(p, Object.assign({}, o, {model: modelOf(o.model)})),
  weakEfficiency: (p, batch, o) => weakEfficiency(p, batch, Object.assign({}, o, {model: modelOf(o.model)})),
  strongEfficiency: (p, globalBatch, o) =>
    strongEfficiency(p, globalBatch, Object.assign({}, o, {model: modelOf(o.model)})),
};
