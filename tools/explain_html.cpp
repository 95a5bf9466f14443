// glass explain --html FILE — the attention explorer: one self-contained page.
//
// In:  the explanation as JSON (the same object --json prints).
// Out: one HTML file with inline CSS and JavaScript and the data embedded as JSON; it loads
//      nothing from anywhere (no network, no CDN), so it opens from disk anywhere, offline.
//
// The page shows:
//   1. the tokens of the prompt and the answer; clicking one selects it;
//   2. the selected token's attention over itself and every earlier token, as a heatmap with one
//      row per (layer, head) and one column per earlier position;
//   3. the top-5 next tokens with their probabilities at every step, the chosen one marked;
//   4. the KV cache's bytes against the number of cached tokens (C8/C9).
// Opening it as page.html#click=N clicks token N once the page has loaded (the browser test
// uses this, and it makes a selection shareable as a link).
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
  .hint { color: #5a6472; margin: 0 0 10px; max-width: 62em; }
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
  #heatmap { overflow-x: auto; }
  table.heatmap { border-collapse: collapse; font-size: 11px; background: #fff; }
  table.heatmap th { font-weight: normal; color: #4a5462; padding: 2px 4px; }
  table.heatmap th.key { font-family: ui-monospace, "DejaVu Sans Mono", monospace; white-space: pre;
                         writing-mode: vertical-rl; transform: rotate(180deg); text-align: left;
                         max-height: 90px; overflow: hidden; }
  table.heatmap th.row { text-align: right; white-space: nowrap; }
  table.heatmap tr.layer-start td, table.heatmap tr.layer-start th { border-top: 2px solid #9aa4b2; }
  td.cell { width: 30px; min-width: 30px; height: 17px; text-align: center; padding: 0;
            font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 10px; border: 1px solid #fff; }
  #topk { display: flex; flex-wrap: wrap; gap: 14px; }
  .step { background: #fff; border: 1px solid #d5dbe3; border-radius: 6px; padding: 8px 10px; width: 270px; }
  .step h3 { font-size: 13px; margin: 0 0 6px; font-weight: 600; }
  .bar-row { display: grid; grid-template-columns: 86px 1fr 48px; align-items: center; gap: 6px;
             font-size: 12px; margin: 2px 0; }
  .bar-row .label { font-family: ui-monospace, "DejaVu Sans Mono", monospace; white-space: pre;
                    overflow: hidden; text-overflow: ellipsis; }
  .bar-track { background: #eef1f5; height: 13px; border-radius: 3px; }
  .topk-bar { background: #7d9cc9; height: 13px; border-radius: 3px; }
  .bar-row.chosen .topk-bar { background: #2c6bd6; }
  .bar-row.chosen .label { font-weight: bold; }
  #kv svg { background: #fff; border: 1px solid #d5dbe3; border-radius: 6px; }
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

<h2>2. Attention of <span id="selected-label" class="mono">(no token selected)</span></h2>
<p class="hint">One row per head of every layer; one column per position the token may see (itself and
everything before it; the causal mask hides the future). A cell is that head's softmax weight on that
position: each row sums to 1. Darker = more attention.</p>
<div id="heatmap"></div>

<h2>3. The next-token choice at each step</h2>
<p class="hint">The five most probable next tokens (softmax of the logits) after the prefill and after
each decode step; the chosen token is dark.</p>
<div id="topk"></div>

<h2>4. KV cache bytes against cached tokens</h2>
<p class="hint" id="kv-hint"></p>
<div id="kv"></div>

<script type="application/json" id="glass-data">)page";

const char* const kPageEnd = R"page(</script>
<script>
"use strict";
const data = JSON.parse(document.getElementById("glass-data").textContent);
const m = data.model;

function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}
function shownPiece(p) { return p.replace(/\n/g, "\u21b5"); }

// Summary line.
document.getElementById("summary").textContent =
  `Model: dim ${m.dim}, ${m.n_layers} layers, ${m.n_heads} query heads sharing ${m.n_kv_heads} KV heads ` +
  `(head_dim ${m.head_dim}), vocabulary ${m.vocab_size}, context ${m.seq_len}. ` +
  `Prompt: "${data.prompt}". ${data.decode_steps} decode steps, ` +
  (data.sampling.temperature === 0 ? "greedy." : `temperature ${data.sampling.temperature}, seed ${data.sampling.seed}.`);

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

// 2. The heatmap of one token's attention: rows (layer, head), columns 0..position.
function colour(w) { return `hsl(216, 70%, ${Math.round(97 - 70 * w)}%)`; }
function select(position) {
  const rows = data.attention[position];  // [layer][head] -> weights over 0..position
  document.querySelectorAll(".token").forEach(b =>
    b.classList.toggle("selected", Number(b.dataset.position) === position));
  const token = data.tokens[position];
  document.getElementById("selected-label").textContent =
    `position ${position}, "${shownPiece(token.piece)}" (id ${token.id})`;
  const table = el("table", {"class": "heatmap", "data-position": position});
  const head = el("tr");
  head.appendChild(el("th", {}, "layer.head"));
  for (let k = 0; k <= position; k++)
    head.appendChild(el("th", {"class": "key", "title": `position ${k}`}, `${k} ${shownPiece(data.tokens[k].piece)}`));
  table.appendChild(head);
  rows.forEach((layer, l) => layer.forEach((weights, h) => {
    const tr = el("tr", h === 0 ? {"class": "layer-start"} : {});
    tr.appendChild(el("th", {"class": "row"}, `L${l}.H${h}`));
    weights.forEach((w, k) => {
      const td = el("td", {"class": "cell", "data-layer": l, "data-head": h, "data-key": k,
                           "data-weight": String(w), "title": `layer ${l}, head ${h} -> position ${k}: ${w.toFixed(4)}`},
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
}

// 3. Top-5 bars per step.
const topk = document.getElementById("topk");
data.steps.forEach((s, i) => {
  const last = s.first_position + s.input_ids.length - 1;
  const div = el("div", {"class": "step", "data-step": i});
  div.appendChild(el("h3", {}, s.kind === "prefill" ? `prefill of positions 0..${last}` :
                                 `decode step ${i}: position ${last}`));
  for (const t of s.top5) {
    const row = el("div", {"class": "bar-row" + (t.id === s.decision.id ? " chosen" : "")});
    row.appendChild(el("span", {"class": "label", "title": `id ${t.id}`}, shownPiece(t.piece)));
    const track = el("div", {"class": "bar-track"});
    const bar = el("div", {"class": "topk-bar", "data-step": i, "data-id": t.id, "data-probability": String(t.probability)});
    bar.style.width = (100 * t.probability).toFixed(1) + "%";
    track.appendChild(bar);
    row.appendChild(track);
    row.appendChild(el("span", {}, t.probability.toFixed(3)));
    div.appendChild(row);
  }
  div.appendChild(el("div", {"class": "hint"}, s.decision.rule === "greedy" ?
    `greedy: takes "${shownPiece(s.decision.piece)}"` :
    `sampled "${shownPiece(s.decision.piece)}" (coin ${s.decision.coin.toFixed(3)}, ${s.decision.candidates} candidates)`));
  topk.appendChild(div);
});

// 4. KV cache bytes against tokens: the measured points and the formula's straight line.
(function kvChart() {
  const perToken = 2 * m.n_layers * m.n_kv_heads * m.head_dim * 4;
  document.getElementById("kv-hint").textContent =
    `Each cached token holds K and V for every layer and KV head: 2 \u00d7 ${m.n_layers} layers \u00d7 ` +
    `${m.n_kv_heads} KV heads \u00d7 ${m.head_dim} head_dim \u00d7 4 bytes = ${perToken} B per token, so the ` +
    `cache grows in a straight line (dots: measured after each step; line: the formula). glass reserves ` +
    `the whole context window up front: ${data.steps[0].kv_cache.cache_bytes_reserved.toLocaleString("en")} B.`;
  const W = 640, H = 280, left = 70, right = 20, top = 16, bottom = 44;
  const points = data.steps.map(s => s.kv_cache);
  const maxT = Math.max(...points.map(p => p.tokens)) + 1;
  const maxB = perToken * maxT;
  const x = t => left + (W - left - right) * t / maxT;
  const y = b => H - bottom - (H - top - bottom) * b / maxB;
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("width", W); svg.setAttribute("height", H);
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

// Start with the last token that went through the model selected; #click=N clicks token N instead.
window.addEventListener("load", () => {
  const wanted = /(?:^#|&)click=(\d+)/.exec(location.hash);
  const fed = data.attention.length - 1;
  if (!wanted) { select(fed); return; }
  const target = document.querySelector(`.token[data-position="${wanted[1]}"]`);
  if (!target || Number(wanted[1]) > fed) {
    document.getElementById("error").textContent = `#click=${wanted[1]}: no token with attention at that position (0..${fed})`;
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
