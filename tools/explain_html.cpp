// glass explain --html FILE — the attention explorer: one self-contained page.
//
// In:  the explanation as JSON (the same object --json prints).
// Out: one HTML file with inline CSS and JavaScript and the data embedded as JSON; it loads
//      nothing from anywhere (no network, no CDN), so it opens from disk anywhere, offline.
//
// The page uses the window's width (grids and charts stretch; only a very wide heatmap scrolls):
//   1. the tokens of the prompt and the answer; clicking one selects it;
//   2. the grouped-query attention groups: which query heads read each KV head;
//   3. the selected token's attention over itself and every earlier token, as a heatmap with one
//      row per (layer, head), coloured by KV group, and one column per earlier position;
//   4. for one layer (buttons choose it), every head's full query x key triangle: row q = the
//      token at position q, column k = a position it may look at; the upper triangle (k > q) is
//      the causal mask, drawn empty (at most the first 160 positions);
//   5. the top-5 next tokens at every step: the model's probability (T = 1) and, when sampling,
//      the distribution the draw used, with where the coin landed; the chosen one marked;
//   6. the KV cache's bytes against the number of cached tokens (C8/C9).
// Opening it as page.html#click=N clicks token N once the page has loaded, #layer=L (or
// #click=N&layer=L) clicks layer L's button (the browser test uses these, and they make a view
// shareable as a link).
#include <cerrno>
#include <cstring>
#include <fstream>

#include "cli.hpp"
#include "explain.hpp"
#include "glass/errors.hpp"

namespace cli {
namespace {

const char* const kPageStart = R"page(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>glass explain: attention explorer</title>
<style>
  body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1d232b;
         background: #f7f8fa; margin: 0; padding: 20px 28px 40px; }
  h1 { font-size: 22px; margin: 0 0 4px; }
  h2 { font-size: 17px; margin: 26px 0 6px; }
  .hint { color: #5a6472; margin: 0 0 10px; max-width: 70em; }
  code, .mono { font-family: ui-monospace, "DejaVu Sans Mono", Menlo, monospace; }
  #tokens { display: flex; flex-wrap: wrap; gap: 6px; }
  .token { font: 14px ui-monospace, "DejaVu Sans Mono", monospace; white-space: pre; cursor: pointer;
           border: 1px solid #b8c2d0; border-radius: 5px; background: #fff; padding: 3px 7px 2px;
           display: inline-flex; flex-direction: column; align-items: center; }
  .token small { font-size: 10px; color: #7a8492; }
  .token.generated { background: #eef7ee; border-color: #8cc08c; }
  .token.next { background: #f1f1f1; border-style: dashed; color: #7a8492; cursor: not-allowed; }
  .token.selected { outline: 3px solid #2c6bd6; outline-offset: 1px; }
  .legend span { display: inline-block; padding: 0 6px; margin-right: 6px; border-radius: 4px; }
  /* Grouped-query attention: one box per KV head, holding the query heads that read it. */
  #gqa { display: flex; flex-wrap: wrap; gap: 10px; }
  .kv-group { flex: 1 1 150px; background: #fff; border: 1px solid #d5dbe3; border-left-width: 6px;
              border-radius: 6px; padding: 6px 10px; }
  .kv-group b { display: block; font-size: 13px; margin-bottom: 4px; }
  .q-head { display: inline-block; font: 12px ui-monospace, "DejaVu Sans Mono", monospace; color: #fff;
            border-radius: 4px; padding: 1px 6px; margin: 0 4px 2px 0; }
  /* The selected token's attention: as wide as the page, scrolling only when the positions need it. */
  #heatmap { overflow-x: auto; }
  table.heatmap { border-collapse: collapse; font-size: 11px; background: #fff; table-layout: fixed; }
  table.heatmap th { font-weight: normal; color: #4a5462; padding: 2px 4px; }
  table.heatmap th.corner { width: 96px; }
  table.heatmap th.key { font-family: ui-monospace, "DejaVu Sans Mono", monospace; white-space: pre;
                         writing-mode: vertical-rl; transform: rotate(180deg); text-align: left;
                         max-height: 90px; overflow: hidden; }
  table.heatmap th.row { text-align: right; white-space: nowrap; border-right: 5px solid transparent; }
  table.heatmap tr.layer-start td, table.heatmap tr.layer-start th { border-top: 2px solid #9aa4b2; }
  td.cell { height: 17px; text-align: center; padding: 0; overflow: hidden;
            font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 10px; border: 1px solid #fff; }
  /* The query x key triangle of every head: a grid that fills the page's width. */
  #layer-buttons { margin: 0 0 8px; }
  .layer-button { font: inherit; font-size: 13px; margin-right: 4px; padding: 2px 10px; cursor: pointer;
                  border: 1px solid #b8c2d0; border-radius: 5px; background: #fff; }
  .layer-button.active { background: #2c6bd6; border-color: #2c6bd6; color: #fff; }
  #triangles { display: grid; grid-template-columns: repeat(auto-fill, minmax(230px, 1fr)); gap: 14px; }
  .triangle { background: #fff; border: 1px solid #d5dbe3; border-top-width: 5px; border-radius: 6px;
              padding: 6px 8px 8px; }
  .triangle h3 { font-size: 13px; margin: 0 0 6px; font-weight: 600; }
  .tri { display: grid; gap: 1px; }
  .tri-cell, .masked { aspect-ratio: 1; min-width: 0; }
  .masked { background: repeating-linear-gradient(45deg, #fafbfc, #fafbfc 3px, #eef1f5 3px, #eef1f5 5px); }
  .tri-cell.current { outline: 1.5px solid #e07b00; outline-offset: -1px; }
  /* The next-token choice: cards that share the page's width. */
  #topk { display: flex; flex-wrap: wrap; gap: 14px; }
  .step { background: #fff; border: 1px solid #d5dbe3; border-radius: 6px; padding: 8px 10px;
          flex: 1 1 270px; max-width: 480px; }
  .step h3 { font-size: 13px; margin: 0 0 6px; font-weight: 600; }
  .bar-row { display: grid; grid-template-columns: 86px 1fr 98px; align-items: center; gap: 6px;
             font-size: 12px; margin: 3px 0; }
  .bar-row .label { font-family: ui-monospace, "DejaVu Sans Mono", monospace; white-space: pre;
                    overflow: hidden; text-overflow: ellipsis; }
  .bar-track { background: #eef1f5; border-radius: 3px; }
  .model-bar { background: #b9c3d1; height: 5px; border-radius: 3px; }
  .topk-bar { background: #7d9cc9; height: 11px; border-radius: 3px; }
  .bar-row.chosen .topk-bar { background: #2c6bd6; }
  .bar-row.chosen .label { font-weight: bold; }
  .step .decision { font-size: 12px; margin: 6px 0 0; }
  .numbers { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 11px; text-align: right; }
  .bar-key span { display: inline-block; width: 18px; margin: 0 4px 0 10px; vertical-align: middle; border-radius: 3px; }
  #kv svg { background: #fff; border: 1px solid #d5dbe3; border-radius: 6px; max-height: 420px; }
  #error { color: #b00020; font-weight: bold; }
</style>
</head>
<body>
<h1>glass explain: one request, looked at from inside</h1>
<p class="hint" id="summary"></p>
<p id="error"></p>

<h2>1. Tokens of the prompt and the answer</h2>
<p class="hint">Click a token to see where it looked. The small number is its position (= its row in
the KV cache). <span class="legend"><span style="background:#fff;border:1px solid #b8c2d0">prompt</span>
<span style="background:#eef7ee;border:1px solid #8cc08c">generated, fed back</span>
<span style="background:#f1f1f1;border:1px dashed #b8c2d0">chosen last: not fed through the model yet, so it has no attention</span></span></p>
<div id="tokens"></div>

<h2>2. Which query heads share a KV head (grouped-query attention)</h2>
<p class="hint" id="gqa-hint"></p>
<div id="gqa"></div>

<h2>3. Attention of <span id="selected-label" class="mono">(no token selected)</span></h2>
<p class="hint">One row per head of every layer (the colour at the left is the head's KV group); one
column per position the token may see (itself and everything before it; the causal mask hides the
future). A cell is that head's softmax weight on that position: each row sums to 1. Darker = more
attention.</p>
<div id="heatmap"></div>

<h2>4. Every position's attention, per head: query &times; key</h2>
<p class="hint">The classic causal-mask picture, for every head of one layer: row q is the token at
position q looking back, column k the position it looks at. Only k &le; q exists; the hatched upper
triangle is what the mask hides. Each row sums to 1; the selected token's row is outlined. Heads with
the same top colour read the same K and V.</p>
<div id="layer-buttons"></div>
<p class="hint" id="triangles-note"></p>
<div id="triangles"></div>

<h2>5. The next-token choice at each step</h2>
<p class="hint" id="topk-hint"></p>
<div id="topk"></div>

<h2>6. KV cache bytes against cached tokens</h2>
<p class="hint" id="kv-hint"></p>
<div id="kv"></div>

<script type="application/json" id="glass-data">)page";

const char* const kPageEnd = R"page(</script>
<script>
"use strict";
const data = JSON.parse(document.getElementById("glass-data").textContent);
const m = data.model;
const sampled = data.sampling.temperature !== 0;
const headsPerKv = m.n_heads / m.n_kv_heads;
const fed = data.attention.length;         // positions that went through the model
const kTriangleLimit = 160;                // more positions than this: the triangles show the first 160

function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}
function shownPiece(p) { return p.replace(/\n/g, "\u21b5"); }
function colour(w) { return `hsl(216, 70%, ${Math.round(97 - 70 * w)}%)`; }
function kvHeadOf(h) { return Math.floor(h / headsPerKv); }
function groupColour(g) { return `hsl(${Math.round(25 + 330 * g / m.n_kv_heads)}, 55%, 45%)`; }

// Summary line.
document.getElementById("summary").textContent =
  `Model: dim ${m.dim}, ${m.n_layers} layers, ${m.n_heads} query heads sharing ${m.n_kv_heads} KV heads ` +
  `(head_dim ${m.head_dim}), vocabulary ${m.vocab_size}, context ${m.seq_len}. ` +
  `Prompt: "${data.prompt}". ${data.decode_steps} decode steps, ` +
  (sampled ? `temperature ${data.sampling.temperature}, top-p ${data.sampling.top_p}, top-k ${data.sampling.top_k}, ` +
             `min-p ${data.sampling.min_p}, seed ${data.sampling.seed}.` : "greedy.");

// 1. Tokens.
const tokensDiv = document.getElementById("tokens");
for (const t of data.tokens) {
  const b = el("button", {"class": "token " + t.role, "data-position": t.position, "data-id": t.id,
                          "title": `position ${t.position}, id ${t.id}`});
  b.appendChild(el("span", {}, shownPiece(t.piece)));
  b.appendChild(el("small", {}, String(t.position)));
  if (t.role !== "next") b.addEventListener("click", () => select(t.position));
  tokensDiv.appendChild(b);
}

// 2. GQA groups: KV head g is read by query heads g*headsPerKv .. (g+1)*headsPerKv - 1.
document.getElementById("gqa-hint").textContent =
  `Every layer has ${m.n_heads} query heads but only ${m.n_kv_heads} K/V heads: each K/V head is read by ` +
  `${headsPerKv} query heads, so the KV cache stores ${m.n_kv_heads} K and V rows per layer and token, ` +
  `not ${m.n_heads} (${m.n_heads / m.n_kv_heads}\u00d7 less memory).`;
const gqaDiv = document.getElementById("gqa");
for (let g = 0; g < m.n_kv_heads; g++) {
  const heads = [];
  for (let h = g * headsPerKv; h < (g + 1) * headsPerKv; h++) heads.push(h);
  const box = el("div", {"class": "kv-group", "data-kv-head": g, "data-heads": heads.join(" ")});
  box.style.borderLeftColor = groupColour(g);
  box.appendChild(el("b", {}, `KV head ${g}, read by`));
  for (const h of heads) {
    const chip = el("span", {"class": "q-head", "data-head": h, "data-kv-head": g}, `H${h}`);
    chip.style.background = groupColour(g);
    box.appendChild(chip);
  }
  gqaDiv.appendChild(box);
}

// 3. The heatmap of one token's attention: rows (layer, head), columns 0..position.
function select(position) {
  const rows = data.attention[position];  // [layer][head] -> weights over 0..position
  document.querySelectorAll(".token").forEach(b =>
    b.classList.toggle("selected", Number(b.dataset.position) === position));
  const token = data.tokens[position];
  document.getElementById("selected-label").textContent =
    `position ${position}, "${shownPiece(token.piece)}" (id ${token.id})`;
  const table = el("table", {"class": "heatmap", "data-position": position});
  table.style.width = `max(100%, ${96 + 26 * (position + 1)}px)`;  // the page's width, or scroll
  const head = el("tr");
  head.appendChild(el("th", {"class": "corner"}, "layer.head (kv)"));
  for (let k = 0; k <= position; k++)
    head.appendChild(el("th", {"class": "key", "title": `position ${k}`}, `${k} ${shownPiece(data.tokens[k].piece)}`));
  table.appendChild(head);
  rows.forEach((layer, l) => layer.forEach((weights, h) => {
    const tr = el("tr", h === 0 ? {"class": "layer-start"} : {});
    const label = el("th", {"class": "row", "data-kv-head": kvHeadOf(h)}, `L${l}.H${h} (kv ${kvHeadOf(h)})`);
    label.style.borderRightColor = groupColour(kvHeadOf(h));
    tr.appendChild(label);
    weights.forEach((w, k) => {
      const td = el("td", {"class": "cell", "data-layer": l, "data-head": h, "data-kv-head": kvHeadOf(h),
                           "data-key": k, "data-weight": String(w),
                           "title": `layer ${l}, head ${h} (kv ${kvHeadOf(h)}) -> position ${k}: ${w.toFixed(4)}`},
                    w >= 0.005 ? w.toFixed(2).replace(/^0/, "") : "");
      td.style.background = colour(w);
      td.style.color = w > 0.55 ? "#fff" : "#1d232b";
      tr.appendChild(td);
    });
    table.appendChild(tr);
  }));
  const box = document.getElementById("heatmap");
  box.replaceChildren(table);
  box.dataset.selected = position;
  document.querySelectorAll(".tri-cell").forEach(c =>
    c.classList.toggle("current", Number(c.dataset.query) === position));
}

// 4. The query x key triangle of every head of one layer.
const shownPositions = Math.min(fed, kTriangleLimit);
if (fed > kTriangleLimit)
  document.getElementById("triangles-note").textContent =
    `${fed} positions: the triangles show positions 0..${kTriangleLimit - 1} (the heatmap above shows any token).`;
const layerButtons = document.getElementById("layer-buttons");
for (let l = 0; l < m.n_layers; l++) {
  const b = el("button", {"class": "layer-button", "data-layer": l}, `layer ${l}`);
  b.addEventListener("click", () => drawTriangles(l));
  layerButtons.appendChild(b);
}
function drawTriangles(layer) {
  document.querySelectorAll(".layer-button").forEach(b =>
    b.classList.toggle("active", Number(b.dataset.layer) === layer));
  const selected = Number(document.getElementById("heatmap").dataset.selected);
  const boxes = [];
  for (let h = 0; h < m.n_heads; h++) {
    const box = el("div", {"class": "triangle", "data-layer": layer, "data-head": h, "data-kv-head": kvHeadOf(h)});
    box.style.borderTopColor = groupColour(kvHeadOf(h));
    box.appendChild(el("h3", {}, `layer ${layer}, head ${h} (reads KV head ${kvHeadOf(h)})`));
    const grid = el("div", {"class": "tri"});
    grid.style.gridTemplateColumns = `repeat(${shownPositions}, minmax(0, 1fr))`;
    for (let q = 0; q < shownPositions; q++) {
      const weights = data.attention[q][layer][h];  // over keys 0..q
      for (let k = 0; k < shownPositions; k++) {
        if (k > q) {  // the future: masked, no weight
          grid.appendChild(el("div", {"class": "masked", "data-query": q, "data-key": k}));
          continue;
        }
        const w = weights[k];
        const cell = el("div", {"class": "tri-cell" + (q === selected ? " current" : ""), "data-head": h,
                                "data-query": q, "data-key": k, "data-weight": String(w),
                                "title": `head ${h}: position ${q} "${shownPiece(data.tokens[q].piece)}" -> ` +
                                         `${k} "${shownPiece(data.tokens[k].piece)}": ${w.toFixed(4)}`});
        cell.style.background = colour(w);
        grid.appendChild(cell);
      }
    }
    box.appendChild(grid);
    boxes.push(box);
  }
  const triangles = document.getElementById("triangles");
  triangles.replaceChildren(...boxes);
  triangles.dataset.layer = layer;
}

// 5. Top-5 bars per step: the model's probability (T = 1) and, when sampling, the distribution the
// draw used (after temperature and truncation, renormalized): the coin lands in the latter.
document.getElementById("topk-hint").textContent = sampled ?
  "The five tokens the model finds most probable after the prefill and after each decode step. Thin grey bar: " +
  "the model's own probability (softmax of the logits, T = 1). Blue bar: the distribution the draw used " +
  "(temperature, then top-k/min-p/top-p, renormalized; empty = truncated away). The coin is a point on " +
  "the running sum of the blue numbers; the chosen token is dark." :
  "The five most probable next tokens (softmax of the logits) after the prefill and after each decode step; " +
  "greedy takes the largest, shown dark.";
const topk = document.getElementById("topk");
if (sampled) {
  const key = el("p", {"class": "hint bar-key"});
  const grey = el("span"); grey.style.background = "#b9c3d1"; grey.style.height = "5px";
  const blue = el("span"); blue.style.background = "#7d9cc9"; blue.style.height = "11px";
  key.append("key:", grey, "the model's p", blue, "draw p");
  topk.before(key);
}
data.steps.forEach((s, i) => {
  const last = s.first_position + s.input_ids.length - 1;
  const div = el("div", {"class": "step", "data-step": i});
  div.appendChild(el("h3", {}, s.kind === "prefill" ? `after the prefill of positions 0..${last}` :
                                 `after decode step ${i}: position ${last}`));
  for (const t of s.top5) {
    const row = el("div", {"class": "bar-row" + (t.id === s.decision.id ? " chosen" : "")});
    row.appendChild(el("span", {"class": "label", "title": `id ${t.id}`}, shownPiece(t.piece)));
    const track = el("div", {"class": "bar-track"});
    const model = el("div", {"class": "model-bar", "data-step": i, "data-id": t.id,
                             "data-probability": String(t.probability)});
    model.style.width = (100 * t.probability).toFixed(1) + "%";
    track.appendChild(model);
    const shown = sampled ? t.draw_probability : t.probability;
    const bar = el("div", {"class": "topk-bar", "data-step": i, "data-id": t.id, "data-probability": String(t.probability),
                           "data-draw-probability": String(t.draw_probability)});
    bar.style.width = (100 * shown).toFixed(1) + "%";
    if (sampled) track.appendChild(bar); else { model.replaceWith(bar); bar.classList.add("model-only"); }
    row.appendChild(track);
    row.appendChild(el("span", {"class": "numbers"}, sampled ?
      `${t.probability.toFixed(3)} \u2192 ${t.draw_probability.toFixed(3)}` : t.probability.toFixed(3)));
    div.appendChild(row);
  }
  const d = s.decision;
  div.appendChild(el("div", {"class": "hint decision"}, d.rule === "greedy" ?
    `greedy: takes "${shownPiece(d.piece)}"` :
    `coin ${d.coin.toFixed(4)} lands between ${d.cumulative_before.toFixed(4)} and ${d.cumulative_after.toFixed(4)} ` +
    `of the running sum over ${d.candidates} candidate${d.candidates === 1 ? "" : "s"} ` +
    `(${d.order === "id" ? "in id order" : "most probable first"}): ` +
    `"${shownPiece(d.piece)}", draw p ${d.draw_probability.toFixed(3)}`));
  topk.appendChild(div);
});

// 6. KV cache bytes against tokens: the measured points and the formula's straight line.
(function kvChart() {
  const perToken = 2 * m.n_layers * m.n_kv_heads * m.head_dim * 4;
  document.getElementById("kv-hint").textContent =
    `Each cached token holds K and V for every layer and KV head: 2 \u00d7 ${m.n_layers} layers \u00d7 ` +
    `${m.n_kv_heads} KV heads \u00d7 ${m.head_dim} head_dim \u00d7 4 bytes = ${perToken} B per token, so the ` +
    `cache grows in a straight line (dots: measured after each step; line: the formula). glass reserves ` +
    `the whole context window up front: ${data.steps[0].kv_cache.cache_bytes_reserved.toLocaleString("en")} B.`;
  const W = 900, H = 300, left = 70, right = 20, top = 16, bottom = 44;
  const points = data.steps.map(s => s.kv_cache);
  const maxT = Math.max(...points.map(p => p.tokens)) + 1;
  const maxB = perToken * maxT;
  const x = t => left + (W - left - right) * t / maxT;
  const y = b => H - bottom - (H - top - bottom) * b / maxB;
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);  // scales to the page's width
  svg.setAttribute("width", "100%");
  svg.setAttribute("preserveAspectRatio", "xMinYMin meet");
  function add(tag, attrs, text) {
    const e = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    svg.appendChild(e);
    return e;
  }
  add("line", {x1: left, y1: y(0), x2: W - right, y2: y(0), stroke: "#555"});
  add("line", {x1: left, y1: y(0), x2: left, y2: top, stroke: "#555"});
  for (let i = 0; i <= 4; i++) {
    const b = Math.round(maxB * i / 4);
    add("line", {x1: left - 4, y1: y(b), x2: W - right, y2: y(b), stroke: "#e3e7ec"});
    add("text", {x: left - 8, y: y(b) + 4, "text-anchor": "end", "font-size": 11}, b.toLocaleString("en"));
  }
  const tickStep = Math.max(1, Math.ceil(maxT / 10));
  for (let t = 0; t <= maxT; t += tickStep)
    add("text", {x: x(t), y: H - bottom + 16, "text-anchor": "middle", "font-size": 11}, String(t));
  add("text", {x: (left + W - right) / 2, y: H - 8, "text-anchor": "middle", "font-size": 12}, "tokens in the cache");
  add("text", {x: 14, y: top + (H - top - bottom) / 2, "font-size": 12, "text-anchor": "middle",
               transform: `rotate(-90 14 ${top + (H - top - bottom) / 2})`}, "bytes");
  add("line", {x1: x(0), y1: y(0), x2: x(maxT), y2: y(maxB), stroke: "#9aa4b2", "stroke-dasharray": "5 4"});
  points.forEach((p, i) => {
    const c = add("circle", {"class": "kv-point", cx: x(p.tokens), cy: y(p.cache_bytes_used), r: 5,
                             fill: i === 0 ? "#2c6bd6" : "#3a9a3a", "data-tokens": p.tokens,
                             "data-bytes": p.cache_bytes_used});
    const t = document.createElementNS(ns, "title");
    t.textContent = `${i === 0 ? "after prefill" : "after decode step " + i}: ${p.tokens} tokens, ${p.cache_bytes_used} B`;
    c.appendChild(t);
  });
  const first = points[0];
  add("text", {x: x(first.tokens) + 8, y: y(first.cache_bytes_used) + 16, "font-size": 11, fill: "#2c6bd6"},
      `after prefill: ${first.cache_bytes_used.toLocaleString("en")} B`);
  const last = points[points.length - 1];
  if (points.length > 1)
    add("text", {x: x(last.tokens) - 8, y: y(last.cache_bytes_used) - 10, "font-size": 11, fill: "#3a9a3a",
                 "text-anchor": "end"}, `after ${points.length - 1} decode steps: ${last.cache_bytes_used.toLocaleString("en")} B`);
  document.getElementById("kv").appendChild(svg);
})();

// Start with the last token that went through the model selected and layer 0's triangles;
// #click=N clicks token N instead, #layer=L (alone or after &) clicks layer L's button.
window.addEventListener("load", () => {
  const wanted = /(?:^#|&)click=(\d+)/.exec(location.hash);
  const wantedLayer = /(?:^#|&)layer=(\d+)/.exec(location.hash);
  if (wantedLayer && Number(wantedLayer[1]) >= m.n_layers) {
    document.getElementById("error").textContent = `#layer=${wantedLayer[1]}: the model has layers 0..${m.n_layers - 1}`;
    return;
  }
  select(fed - 1);
  drawTriangles(0);
  if (wantedLayer)
    document.querySelector(`.layer-button[data-layer="${wantedLayer[1]}"]`)
      .dispatchEvent(new MouseEvent("click", {bubbles: true, cancelable: true, view: window}));
  if (!wanted) return;
  const target = document.querySelector(`.token[data-position="${wanted[1]}"]`);
  if (!target || Number(wanted[1]) >= fed) {
    document.getElementById("error").textContent = `#click=${wanted[1]}: no token with attention at that position (0..${fed - 1})`;
    return;
  }
  target.dispatchEvent(new MouseEvent("click", {bubbles: true, cancelable: true, view: window}));
});
</script>
</body>
</html>
)page";

}  // namespace

void write_explain_html(const std::string& path, const nlohmann::json& data) {
    // '<' only occurs inside JSON strings; as \u003c it can never end the <script> element early.
    std::string json = dump(data);
    std::string safe;
    safe.reserve(json.size());
    for (char ch : json) safe += ch == '<' ? std::string("\\u003c") : std::string(1, ch);

    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    if (!out) glass::fail("cannot write the HTML page '", path, "': ", std::strerror(errno));
    out << kPageStart << safe << kPageEnd;
    out.close();
    if (!out) glass::fail("writing the HTML page '", path, "' failed: ", std::strerror(errno));
}

}  // namespace cli
