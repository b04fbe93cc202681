/* ==== The explorers: plain SVG, labelled controls, a text readout (aria-live) ====
   Each number shown carries its full-precision value in data-value, what it is in data-key
   and how it is rounded in data-format; the root's data-params holds the exact parameters
   of what is shown (tests/browser/test_explorers.py recomputes them in Python). */
if (CODE.some((name) => name !== "hierarchical"))
  throw new Error("allreduce_explore.js: no hand port for the formulas " + CODE.join(", "));

const SVGNS = "http://www.w3.org/2000/svg";
let uid = 0;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) if (child !== null && child !== undefined)
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return node;
}

function svg(tag, attrs, text) {
  const node = document.createElementNS(SVGNS, tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
  if (text !== undefined) node.textContent = text;
  return node;
}

/* -- rounding: the text beside each data-value (the test rounds the same way) -- */
function mantissa(x) {
  if (x >= 1000) return x.toFixed(0);
  return x.toPrecision(3);
}
function fmtScaled(x, units) {
  if (x === 0) return "0 " + units[units.length - 1][0];
  for (const [unit, size] of units) if (Math.abs(x) >= size) return mantissa(x / size) + " " + unit;
  const [unit, size] = units[units.length - 1];
  return mantissa(x / size) + " " + unit;
}
const TIME = [["s", 1], ["ms", 1e-3], ["µs", 1e-6], ["ns", 1e-9]];
const BYTES = [["TiB", 2 ** 40], ["GiB", 2 ** 30], ["MiB", 2 ** 20], ["KiB", 2 ** 10], ["B", 1]];
const RATE = [["TB/s", 1e12], ["GB/s", 1e9], ["MB/s", 1e6]];
const COUNT = [["G", 1e9], ["M", 1e6], ["k", 1e3]];
const FORMAT = {
  time: (x) => fmtScaled(x, TIME),
  bytes: (x) => fmtScaled(x, BYTES),
  rate: (x) => fmtScaled(x, RATE),
  count: (x) => fmtScaled(x, COUNT),
  number: (x) => (x === 0 ? "0" : Math.abs(x) >= 1e-3 && Math.abs(x) < 1e4 ? mantissa(x)
                  : x.toExponential(2)),
  percent: (x) => mantissa(100 * x) + " %",
  integer: (x) => String(x),
  text: (x) => String(x),
};

function value(key, x, format, shown) {
  return el("span", {"class": "ae-value", "data-key": key, "data-format": format,
                     "data-value": String(x)}, shown === undefined ? FORMAT[format](x) : shown);
}

const NAMES = {recursive_doubling: "recursive doubling", rabenseifner: "Rabenseifner",
               ring: "ring", tree: "tree", torus: "2D ring", hierarchical: "hierarchical",
               pipelined_ring: "pipelined ring", bidirectional_ring: "bidirectional ring",
               naive: "naive", reduce_broadcast: "reduce + broadcast",
               parameter_server: "parameter server",
               sharded_parameter_server: "sharded parameter server",
               allgather: "all-gather", sparse_ring: "sparse ring", dense: "dense"};
const label = (name) => NAMES[name] || name;

/* -- controls: a labelled range (keyboard: arrows, Page Up/Down, Home/End) or select -- */
function slider(box, spec, onchange) {
  const id = "ae-" + (++uid);
  const input = el("input", {type: "range", id: id, min: spec.min, max: spec.max,
                             step: spec.step, value: spec.value, "data-control": spec.name});
  const output = el("output", {"for": id, "class": "ae-output"});
  const row = el("div", {"class": "ae-control"}, el("label", {"for": id}, spec.label), input, output);
  box.append(row);
  const show = () => {
    const x = spec.toValue(Number(input.value));
    output.replaceChildren(value("control:" + spec.name, x, spec.format));
  };
  input.addEventListener("input", () => { show(); onchange(spec.name, spec.toValue(Number(input.value))); });
  show();
  return {input: input, set(x) { input.value = spec.fromValue(x); show(); }, show: show};
}

function select(box, name, text, options, chosen, onchange) {
  const id = "ae-" + (++uid);
  const input = el("select", {id: id, "data-control": name},
                   options.map(([v, t]) => el("option", {value: v, selected: v === chosen}, t)));
  box.append(el("div", {"class": "ae-control"}, el("label", {"for": id}, text), input));
  input.addEventListener("change", () => onchange(name, input.value));
  return input;
}

const logControl = (name, text, lo, hi, step, x, format, scale) => ({
  name: name, label: text, min: lo, max: hi, step: step, format: format,
  value: Math.log10(x / (scale || 1)),
  toValue: (u) => Math.pow(10, u) * (scale || 1), fromValue: (v) => Math.log10(v / (scale || 1))});

// p from 2 to 4,096: every integer to 16, then 8 values per doubling
const P_VALUES = (() => {
  const values = new Set();
  for (let p = 2; p <= 16; p++) values.add(p);
  for (let x = 4; x <= 12 + 1e-9; x += 1 / 8) values.add(Math.round(Math.pow(2, x)));
  return Array.from(values).filter((p) => p <= 4096).sort((a, b) => a - b);
})();
const indexControl = (name, text, values, x, format) => ({
  name: name, label: text, min: 0, max: values.length - 1, step: 1, format: format || "integer",
  value: values.indexOf(x), toValue: (i) => values[i],
  fromValue: (v) => Math.max(0, values.indexOf(v))});
const sizeControl = (name, text, lo, hi, x) => ({
  name: name, label: text, min: lo, max: hi, step: 0.125, format: "bytes", value: Math.log2(x),
  toValue: (u) => Math.round(Math.pow(2, u)), fromValue: (v) => Math.log2(v)});

function frame(root, title) {
  root.replaceChildren();
  root.hidden = false;
  root.classList.add("ae-root");
  const controls = el("div", {"class": "ae-controls", role: "group", "aria-label": title + ": settings"});
  const figure = el("div", {"class": "ae-figure"});
  const readout = el("div", {"class": "ae-readout", "aria-live": "polite"});
  root.append(el("p", {"class": "ae-title"}, title), controls, figure, readout);
  return {controls: controls, figure: figure, readout: readout};
}

/* -- a log-log plot of lines, with marks -- */
const tick = (text) => text.replace(/\.0+(?=\D|$)/, "").replace(/(\.\d*?)0+(?=\D|$)/, "$1");
function plot(box, spec) {
  const W = 640, H = 300, L = 84, R = 28, T = 12, B = 40;
  const root = svg("svg", {viewBox: `0 0 ${W} ${H}`, role: "img", "class": "ae-plot",
                           "aria-label": spec.description});
  const [x0, x1] = spec.x, ys = spec.lines.flatMap((l) => l.points.map((pt) => pt[1]))
    .filter((y) => y > 0 && isFinite(y));
  let y0 = Math.pow(10, Math.floor(Math.log10(Math.min(...ys))));
  let y1 = Math.pow(10, Math.ceil(Math.log10(Math.max(...ys))));
  if (spec.y) [y0, y1] = spec.y;
  if (y1 <= y0) y1 = y0 * 10;
  const sx = (x) => L + (W - L - R) * (Math.log(x / x0) / Math.log(x1 / x0));
  const sy = (y) => T + (H - T - B) * (1 - Math.log(y / y0) / Math.log(y1 / y0));
  root.append(svg("rect", {x: L, y: T, width: W - L - R, height: H - T - B, "class": "ae-axes"}));
  for (const [x, text] of spec.xticks) {
    root.append(svg("line", {x1: sx(x), x2: sx(x), y1: T, y2: H - B, "class": "ae-grid"}));
    root.append(svg("text", {x: sx(x), y: H - B + 16, "text-anchor": "middle"}, text));
  }
  for (let y = y0; y <= y1 * 1.0001; y *= 10) {
    root.append(svg("line", {x1: L, x2: W - R, y1: sy(y), y2: sy(y), "class": "ae-grid"}));
    root.append(svg("text", {x: L - 4, y: sy(y) + 4, "text-anchor": "end"}, tick(spec.yformat(y))));
  }
  root.append(svg("text", {x: (L + W - R) / 2, y: H - 4, "text-anchor": "middle"}, spec.xlabel));
  root.append(svg("text", {x: 14, y: (T + H - B) / 2, "text-anchor": "middle",
                           transform: `rotate(-90 14 ${(T + H - B) / 2})`}, spec.ylabel));
  const clip = (y) => Math.min(Math.max(y, y0), y1);
  for (const line of spec.lines) {
    const d = line.points.filter((pt) => pt[1] > 0).map(([x, y], i) =>
      `${i ? "L" : "M"}${sx(x).toFixed(1)},${sy(clip(y)).toFixed(1)}`).join("");
    root.append(svg("path", {d: d, fill: "none", stroke: line.colour, "stroke-width": line.width || 2,
                             "stroke-dasharray": line.dash || "none"}));
  }
  for (const mark of spec.marks || []) {
    root.append(svg("line", {x1: sx(mark.x), x2: sx(mark.x), y1: T, y2: H - B,
                             stroke: mark.colour || "#000", "stroke-dasharray": mark.dash || "none",
                             "stroke-width": 1.5}));
    if (mark.text) root.append(svg("text", {x: sx(mark.x) + 3, y: T + 14}, mark.text));
  }
  const legend = el("ul", {"class": "ae-legend"}, spec.lines.filter((l) => l.label).map((l) =>
    el("li", {}, el("span", {"class": "ae-swatch", style: `border-color:${l.colour};border-style:${l.dash ? "dashed" : "solid"}`}), l.label)));
  box.replaceChildren(root, legend);
}

const sizeTicks = (lo, hi) => {
  const ticks = [];
  for (let e = Math.ceil(Math.log2(lo)); e <= Math.log2(hi); e++)
    if (e % 5 === 0) ticks.push([2 ** e, tick(fmtScaled(2 ** e, BYTES))]);
  return ticks;
};
const sweep = (lo, hi, count) => Array.from({length: count + 1}, (_, i) =>
  Math.pow(2, Math.log2(lo) + (Math.log2(hi) - Math.log2(lo)) * i / count));
const COLOURS = DATA.colours;

/* ---- ch60: which algorithm? ---- */
function chooseExplorer(root) {
  const ui = frame(root, "Which algorithm? The model's prediction for each algorithm");
  const plotted = [...DATA.candidates, "tree", "torus"];
  const first = Object.keys(DATA.presets)[1];
  const preset = DATA.presets[first];
  const state = {p: 64, nbytes: 1 << 20, alpha: preset.alpha, beta: 1 / preset.bandwidth,
                 gamma: preset.reduction ? 1 / preset.reduction : 0, overhead: preset.overhead};
  const controls = {};
  const presetInput = select(ui.controls, "preset", "Network",
    [...Object.keys(DATA.presets).map((name) => [name, name]), ["", "as set below"]], first, (_, name) => {
      const chosen = DATA.presets[name];
      if (!chosen) return;
      Object.assign(state, {alpha: chosen.alpha, beta: 1 / chosen.bandwidth,
                            gamma: chosen.reduction ? 1 / chosen.reduction : 0,
                            overhead: chosen.overhead});
      controls.alpha.set(state.alpha); controls.bandwidth.set(1 / state.beta);
      controls.reduction.set(1 / state.gamma); controls.overhead.set(state.overhead);
      update();
    });
  const change = (name, x) => {
    if (name !== "p" && name !== "nbytes") presetInput.value = "";
    if (name === "bandwidth") state.beta = 1 / x;
    else if (name === "reduction") state.gamma = 1 / x;
    else state[name] = x;
    update();
  };
  controls.p = slider(ui.controls, indexControl("p", "Ranks p", P_VALUES, state.p), change);
  controls.nbytes = slider(ui.controls, sizeControl("nbytes", "Message size per rank", 0, 32,
                                                    state.nbytes), change);
  controls.alpha = slider(ui.controls, logControl("alpha", "Latency α per message", -7, -3, 0.01,
                                                  state.alpha, "time"), change);
  controls.bandwidth = slider(ui.controls, logControl("bandwidth", "Link bandwidth 1/β", 8, 12,
                                                      0.01, 1 / state.beta, "rate"), change);
  controls.reduction = slider(ui.controls, logControl("reduction", "Reduction rate 1/γ", 8, 13,
                                                      0.01, 1 / state.gamma, "rate"), change);
  controls.overhead = slider(ui.controls, {name: "overhead", label: "Overhead per call",
    min: 0, max: 200, step: 0.1, format: "time", value: state.overhead * 1e6,
    toValue: (u) => u * 1e-6, fromValue: (v) => v * 1e6}, change);
  presetInput.dispatchEvent(new Event("change"));

  function update() {
    const model = {alpha: state.alpha, beta: state.beta, gamma: state.gamma, overhead: state.overhead};
    const {p, nbytes} = state;
    root.dataset.params = JSON.stringify(Object.assign({}, model, {p: p, nbytes: nbytes}));
    const winner = fastest(nbytes, p, model);
    const crossings = [];
    for (const a of DATA.candidates) for (const b of DATA.candidates) if (a !== b) {
      const at = crossover(model, a, b, p, {});
      if (at !== null) crossings.push([a, b, at]);
    }
    const sizes = sweep(1, 2 ** 32, 128);
    plot(ui.figure, {
      description: `Predicted time against message size on ${p} ranks, for ${plotted.map(label).join(", ")}`,
      x: [1, 2 ** 32], xticks: sizeTicks(1, 2 ** 32), xlabel: "message size per rank",
      ylabel: "predicted time", yformat: FORMAT.time,
      lines: plotted.map((name, i) => ({label: label(name), colour: COLOURS[i],
        width: DATA.candidates.includes(name) ? 2.5 : 1.5, dash: DATA.candidates.includes(name) ? null : "5 3",
        points: sizes.map((n) => [n, modelTime(model, name, p, n, {})])})),
      marks: [{x: nbytes, text: "this size"},
              ...crossings.map(([, , at]) => ({x: at, colour: "#777", dash: "2 3"}))]});
    const rows = plotted.map((name) => el("tr", {}, el("th", {scope: "row"}, label(name)),
      el("td", {}, value("time:" + name, modelTime(model, name, p, nbytes, {}), "time"))));
    const others = Object.keys(FORMULAS).concat(["hierarchical"]).filter((name) => !plotted.includes(name));
    const more = others.map((name) => el("tr", {}, el("th", {scope: "row"}, label(name)),
      el("td", {}, value("time:" + name, modelTime(model, name, p, nbytes, {}), "time"))));
    ui.readout.replaceChildren(
      el("p", {}, "At ", value("size", nbytes, "bytes"), " on ", value("p", p, "integer"),
         " ranks, auto picks ", el("strong", {}, value("winner", winner, "text", label(winner))), "."),
      el("p", {}, crossings.length ? "Crossovers: " : "No crossover among auto's candidates below 1 PiB.",
         ...crossings.flatMap(([a, b, at], i) => [i ? "; " : "", label(b), " overtakes ", label(a),
                                                  " at ", value(`crossover:${a}:${b}`, at, "bytes")])),
      el("table", {"class": "ae-table"}, el("caption", {}, "Predicted time of one allreduce"), rows),
      el("details", {}, el("summary", {}, "The other algorithms"), el("table", {"class": "ae-table"}, more)));
  }
  update();
}

/* ---- ch40, ch50: the stepper, from traces of the library's code ---- */
function stepperExplorer(root) {
  const ui = frame(root, "Step through an allreduce (traced from the library's code)");
  const algorithms = Object.keys(DATA.stepper);
  const state = {algorithm: root.dataset.algorithm || "tree", p: Number(root.dataset.p || 4), step: 0};
  select(ui.controls, "algorithm", "Algorithm", algorithms.map((a) => [a, label(a)]), state.algorithm,
         (_, a) => { state.algorithm = a; state.step = 0; stepControl.input.max = trace().steps; stepControl.set(0); update(); });
  slider(ui.controls, {name: "p", label: "Ranks p", min: 2, max: 8, step: 1, value: state.p,
                       format: "integer", toValue: (u) => u, fromValue: (v) => v},
         (_, p) => { state.p = p; state.step = 0; stepControl.input.max = trace().steps; stepControl.set(0); update(); });
  const trace = () => DATA.stepper[state.algorithm][String(state.p)];
  const stepControl = slider(ui.controls, {name: "step", label: "Step", min: 0, max: trace().steps,
    step: 1, value: 0, format: "integer", toValue: (u) => u, fromValue: (v) => v},
    (_, s) => { state.step = s; update(); });

  function update() {
    const t = trace(), p = state.p, s = state.step;
    root.dataset.params = JSON.stringify(state);
    const W = 640, rowH = 30, H = 24 + rowH * p, cell = Math.min(24, 360 / t.count);
    const image = svg("svg", {viewBox: `0 0 ${W} ${H}`, role: "img", "class": "ae-plot",
                              "aria-label": `${label(state.algorithm)} on ${p} ranks, after step ${s} of ${t.steps}`});
    const x0 = 70, x1 = x0 + cell * t.count + 40;
    image.append(svg("text", {x: x0, y: 14}, "what each rank holds (shade: share of the p inputs)"));
    for (let r = 0; r < p; r++) {
      const y = 24 + r * rowH;
      image.append(svg("text", {x: 4, y: y + 17}, "rank " + r));
      t.held[s][r].forEach((count, i) => image.append(svg("rect", {
        x: x0 + i * cell, y: y + 3, width: cell - 2, height: rowH - 8, "class": "ae-cell",
        "fill-opacity": (0.1 + 0.9 * count / p).toFixed(3), fill: COLOURS[0]})));
    }
    const moving = t.messages.filter((m) => m[0] === s);
    for (const [, source, dest, , count] of moving) {
      const ya = 24 + source * rowH + rowH / 2, yb = 24 + dest * rowH + rowH / 2;
      const bend = x1 + 30 + 18 * Math.abs(dest - source);
      image.append(svg("path", {d: `M${x1},${ya} C${bend},${ya} ${bend},${yb} ${x1 + 6},${yb}`,
                                fill: "none", stroke: COLOURS[3], "stroke-width": 1.5 + Math.min(3, count / t.count * 3),
                                "marker-end": "url(#ae-arrow)"}));
    }
    const defs = svg("defs");
    const marker = svg("marker", {id: "ae-arrow", viewBox: "0 0 10 10", refX: 9, refY: 5,
                                  markerWidth: 6, markerHeight: 6, orient: "auto-start-reverse"});
    marker.append(svg("path", {d: "M0,0 L10,5 L0,10 z", fill: COLOURS[3]}));
    defs.append(marker);
    image.prepend(defs);
    ui.figure.replaceChildren(image);
    const elements = moving.reduce((a, m) => a + m[4], 0);
    ui.readout.replaceChildren(el("p", {},
      s === 0 ? "Before the first step: each rank holds only its own input. "
              : ["Step ", value("step", s, "integer"), " of ", value("steps", t.steps, "integer"), ": ",
                 value("messages", moving.length, "integer"), " messages, ",
                 value("elements", elements, "integer"), " elements in all. "],
      moving.map(([, a, b, , c]) => `${a}→${b} (${c})`).join(", ")));
  }
  update();
}

/* ---- ch65: two levels of links ---- */
function twoLevelExplorer(root) {
  const ui = frame(root, "Two levels: flat ring, hierarchical and 2D ring");
  const state = {cards: "one", nodes: 4, gpus: 8, intra_alpha: 1e-6, intra_bandwidth: 150e9, inter_alpha: 2e-6,
                 inter_bandwidth: 12.5e9, gamma: 1e-12, nbytes: 1 << 26};
  const change = (name, x) => { state[name] = x; update(); };
  slider(ui.controls, {name: "nodes", label: "Nodes", min: 1, max: 64, step: 1, value: state.nodes,
                       format: "integer", toValue: (u) => u, fromValue: (v) => v}, change);
  slider(ui.controls, {name: "gpus", label: "GPUs per node", min: 1, max: 16, step: 1, value: state.gpus,
                       format: "integer", toValue: (u) => u, fromValue: (v) => v}, change);
  slider(ui.controls, sizeControl("nbytes", "Message size per GPU", 10, 32, state.nbytes), change);
  slider(ui.controls, logControl("intra_bandwidth", "Bandwidth inside a node", 9, 12, 0.01, state.intra_bandwidth, "rate"), change);
  slider(ui.controls, logControl("intra_alpha", "Latency inside a node", -7, -4, 0.01, state.intra_alpha, "time"), change);
  slider(ui.controls, logControl("inter_bandwidth", "Bandwidth of a network card", 8, 12, 0.01, state.inter_bandwidth, "rate"), change);
  slider(ui.controls, logControl("inter_alpha", "Latency between nodes", -7, -3, 0.01, state.inter_alpha, "time"), change);
  select(ui.controls, "cards", "Network cards", [["one", "one per GPU"], ["shared", "one per node, shared"]],
         "one", change);
  const algorithms = ["ring", "hierarchical", "torus"];

  function network() {
    const intra = {alpha: state.intra_alpha, beta: 1 / state.intra_bandwidth, gamma: state.gamma, overhead: 0};
    // cost.Network wants the links between nodes no faster than those inside one
    const inter = {alpha: Math.max(state.inter_alpha, intra.alpha),
                   beta: Math.max(1 / state.inter_bandwidth, intra.beta), gamma: state.gamma, overhead: 0};
    return {intra: intra, inter: inter, ranks_per_node: state.gpus, shared_card: state.cards === "shared"};
  }
  const time = (net, name, p, n) => networkTime(net, name, p, n, name === "hierarchical"
    ? {ranks_per_node: net.ranks_per_node, inner: "ring"} : {});

  function update() {
    const net = network(), p = state.nodes * state.gpus, n = state.nbytes;
    root.dataset.params = JSON.stringify({intra: net.intra, inter: net.inter, ranks_per_node: net.ranks_per_node,
                                          shared_card: net.shared_card, p: p, nbytes: n});
    if (p < 2) {
      ui.figure.replaceChildren();
      ui.readout.replaceChildren(el("p", {}, "One GPU: nothing to reduce."));
      return;
    }
    const sizes = sweep(1024, 2 ** 32, 96);
    const crossings = [];
    for (const a of algorithms) for (const b of algorithms) if (a !== b) {
      const at = crossing((x) => time(net, a, p, x), (x) => time(net, b, p, x));
      if (at !== null) crossings.push([a, b, at]);
    }
    plot(ui.figure, {description: `Predicted time against message size on ${state.nodes} nodes of ${state.gpus} GPUs`,
      x: [1024, 2 ** 32], xticks: sizeTicks(1024, 2 ** 32), xlabel: "message size per GPU",
      ylabel: "predicted time", yformat: FORMAT.time,
      lines: algorithms.map((name, i) => ({label: label(name), colour: COLOURS[i],
                                           points: sizes.map((x) => [x, time(net, name, p, x)])})),
      marks: [{x: n, text: "this size"}, ...crossings.map(([, , at]) => ({x: at, colour: "#777", dash: "2 3"}))]});
    const times = algorithms.map((name) => [name, time(net, name, p, n)]);
    const best = times.reduce((a, b) => (b[1] < a[1] ? b : a));
    const clamped = net.inter.alpha > state.inter_alpha || net.inter.beta > 1 / state.inter_bandwidth;
    ui.readout.replaceChildren(
      clamped ? el("p", {}, "(The links between nodes are taken no faster than those inside one, "
                   + "as the library's cost.Network requires.)") : "",
      el("p", {}, "On ", value("p", p, "integer"), " GPUs at ", value("size", n, "bytes"),
         ", the fastest of the three is ", el("strong", {}, value("winner", best[0], "text", label(best[0]))), "."),
      el("table", {"class": "ae-table"}, el("caption", {}, "Predicted time of one allreduce"),
         times.map(([name, t]) => el("tr", {}, el("th", {scope: "row"}, label(name)),
                                     el("td", {}, value("time:" + name, t, "time"))))),
      el("p", {}, crossings.length ? "Crossovers: " : "No crossover between 1 B and 1 PiB.",
         ...crossings.flatMap(([a, b, at], i) => [i ? "; " : "", label(b), " overtakes ", label(a),
                                                  " at ", value(`crossover:${a}:${b}`, at, "bytes")])));
  }
  update();
}

/* ---- ch80: scaling ---- */
function scalingExplorer(root) {
  const ui = frame(root, "Scaling: one training step on p GPUs");
  const preset = DATA.presets[Object.keys(DATA.presets)[1]];
  const state = {parameters: 250e6, sample_seconds: 0.25 / 32, batch: 32, global_batch: 1024, p: 64,
                 alpha: preset.alpha, bandwidth: preset.bandwidth, overlap: "on"};
  const change = (name, x) => { state[name] = x; update(); };
  slider(ui.controls, logControl("parameters", "Parameters (float32)", 6, 11, 0.05, state.parameters, "count"), change);
  slider(ui.controls, logControl("sample_seconds", "Compute per sample", -5, 0, 0.01, state.sample_seconds, "time"), change);
  slider(ui.controls, {name: "batch", label: "Samples per GPU (weak)", min: 1, max: 256, step: 1, value: state.batch,
                       format: "integer", toValue: (u) => u, fromValue: (v) => v}, change);
  slider(ui.controls, {name: "global_batch", label: "Global batch (strong)", min: 0, max: 16, step: 0.25,
                       value: 10, format: "integer", toValue: (u) => Math.round(Math.pow(2, u)),
                       fromValue: (v) => Math.log2(v)}, change);
  slider(ui.controls, indexControl("p", "GPUs p", P_VALUES, state.p), change);
  slider(ui.controls, logControl("bandwidth", "Link bandwidth", 8, 12, 0.01, state.bandwidth, "rate"), change);
  slider(ui.controls, logControl("alpha", "Latency α", -7, -3, 0.01, state.alpha, "time"), change);
  select(ui.controls, "overlap", "Overlap with the backward pass (⅔ of compute)", [["on", "on"], ["off", "off"]],
         "on", change);

  function update() {
    const model = {alpha: state.alpha, beta: 1 / state.bandwidth,
                   gamma: preset.reduction ? 1 / preset.reduction : 0, overhead: preset.overhead};
    const options = {gradient_bytes: state.parameters * 4, sample_seconds: state.sample_seconds,
                     model: model, overlap: state.overlap === "on" ? 2 / 3 : 0.0};
    const {p, batch, global_batch} = state;
    root.dataset.params = JSON.stringify(Object.assign({}, options, {p: p, batch: batch,
                                                                      global_batch: global_batch}));
    const now = step(p, Object.assign({samples: batch}, options));
    const weak = weakEfficiency(p, batch, options);
    const strong = strongEfficiency(p, global_batch, options);
    const ps = P_VALUES.filter((x) => x >= 2);
    plot(ui.figure, {description: "Weak and strong scaling efficiency against the number of GPUs",
      x: [2, 4096], xticks: [2, 8, 32, 128, 512, 2048].map((x) => [x, String(x)]), xlabel: "GPUs p",
      ylabel: "efficiency", y: [0.001, 1], yformat: FORMAT.percent,
      lines: [{label: "weak", colour: COLOURS[0], points: ps.map((x) => [x, weakEfficiency(x, batch, options)])},
              {label: "strong", colour: COLOURS[1], dash: "5 3",
               points: ps.map((x) => [x, strongEfficiency(x, global_batch, options)])}],
      marks: [{x: p, text: "p"}]});
    ui.readout.replaceChildren(
      el("p", {}, "On ", value("p", p, "integer"), " GPUs a step takes ", value("step", now.seconds, "time"),
         ": compute ", value("compute", now.compute, "time"), ", allreduce ", value("communicate", now.communicate, "time"),
         " (", value("algorithm", now.algorithm, "text", label(now.algorithm)), "), of which ",
         value("exposed", now.exposed, "time"), " is exposed."),
      el("p", {}, "Communication/computation ", value("ratio", now.ratio, "number"),
         "; weak scaling efficiency ", value("weak", weak, "percent"),
         "; strong scaling efficiency ", value("strong", strong, "percent"), "."));
  }
  update();
}

/* ---- ch75: sparse ---- */
function sparseExplorer(root) {
  const ui = frame(root, "Sparse or dense? Time on the wire");
  const preset = DATA.presets[Object.keys(DATA.presets)[1]];
  const state = {density: 0.01, p: 16, n: 1 << 24, overlap: "independent", itemsize: 4};
  const model = {alpha: preset.alpha, beta: 1 / preset.bandwidth, gamma: 1 / preset.reduction, overhead: 0};
  const change = (name, x) => { state[name] = x; update(); };
  slider(ui.controls, logControl("density", "Density", -5, 0, 0.01, state.density, "percent"), change);
  slider(ui.controls, indexControl("p", "Ranks p", P_VALUES.filter((x) => x <= 256), state.p), change);
  slider(ui.controls, {name: "n", label: "Elements n", min: 16, max: 32, step: 0.25, value: 24, format: "number",
                       toValue: (u) => Math.round(Math.pow(2, u)), fromValue: (v) => Math.log2(v)}, change);
  select(ui.controls, "overlap", "Supports", [["independent", "independent"], ["identical", "identical"],
                                              ["disjoint", "disjoint"]], state.overlap, change);
  const unionsOf = (overlap, n, density, p) => {
    const k = density * n;
    return Array.from({length: p + 1}, (_, s) => overlap === "independent" ? sparseUnion(n, density, s)
      : overlap === "identical" ? (s ? k : 0) : Math.min(s * k, n));
  };
  const times = (density, p, n, overlap) => {
    const unions = unionsOf(overlap, n, density, p), k = density * n, size = n * state.itemsize;
    // dense: the values' allreduce and the gather of each rank's count of zero sums, priced
    // as an allreduce of zero_count_bytes (sparse.auto.predict's wire)
    const count = DATA.sparse.zero_count_bytes;
    const out = {dense: modelTime(model, fastest(size, p, model), p, size, {})
                        + modelTime(model, fastest(count, p, model), p, count, {})};
    for (const name of ["allgather", "sparse_ring"]) {
      const t = expectedTerms(name, n, p, k, state.itemsize, (s) => unions[s]);
      out[name] = model.overhead + t.steps * model.alpha + t.bytes * model.beta;
    }
    return out;
  };
  const names = ["dense", "allgather", "sparse_ring"];

  function update() {
    const {density, p, n, overlap} = state;
    root.dataset.params = JSON.stringify(Object.assign({}, state, {model: model}));
    const densities = sweep(1e-5, 1, 60);
    const curves = densities.map((d) => times(d, p, n, overlap));
    const crossings = [];
    for (const a of names) for (const b of names) if (a !== b) {
      // where b overtakes a as the density falls: a bisection on 1/density, as cost.crossing
      const at = crossing((x) => times(1 / x, p, n, overlap)[a], (x) => times(1 / x, p, n, overlap)[b], 1e5);
      if (at !== null) crossings.push([a, b, 1 / at]);
    }
    plot(ui.figure, {description: `Predicted time on the wire against density, ${p} ranks, n = ${n}`,
      x: [1e-5, 1], xticks: [[1e-5, "0.001%"], [1e-4, "0.01%"], [1e-3, "0.1%"], [1e-2, "1%"], [0.1, "10%"], [1, "100%"]],
      xlabel: "density (share of nonzeros per rank)", ylabel: "predicted time", yformat: FORMAT.time,
      lines: names.map((name, i) => ({label: label(name), colour: COLOURS[i],
                                      points: densities.map((d, j) => [d, curves[j][name]])})),
      marks: [{x: density, text: "this density"}]});
    const now = times(density, p, n, overlap);
    const best = names.reduce((a, b) => (now[b] < now[a] ? b : a));
    ui.readout.replaceChildren(
      el("p", {}, "At ", value("density", density, "percent"), " on ", value("p", p, "integer"),
         " ranks, the fastest on the wire is ", el("strong", {}, value("winner", best, "text", label(best))), "."),
      el("table", {"class": "ae-table"}, el("caption", {}, "Predicted time on the wire"),
         names.map((name) => el("tr", {}, el("th", {scope: "row"}, label(name)),
                                el("td", {}, value("time:" + name, now[name], "time"))))),
      el("p", {}, crossings.length ? "Crossovers: " : "No crossover between 0.001% and 100%.",
         ...crossings.flatMap(([a, b, at], i) => [i ? "; " : "", label(b), " overtakes ", label(a),
                                                  " below ", value(`crossover:${a}:${b}`, at, "percent")])));
  }
  update();
}

const EXPLORERS = {choose: chooseExplorer, stepper: stepperExplorer, "two-level": twoLevelExplorer,
                   scaling: scalingExplorer, sparse: sparseExplorer};

function start() {
  for (const root of document.querySelectorAll("[data-explorer]")) {
    const make = EXPLORERS[root.dataset.explorer];
    if (make && !root.dataset.started) { root.dataset.started = "1"; make(root); }
  }
}
if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
else start();
