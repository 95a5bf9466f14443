import fs from "node:fs";
// One markdown table from the JSON lines of `glass bench --probes --json` and decode_bench.mjs
// (stdin: each file's glass rows, then its llama.cpp row), as scripts/llama-cpp-compare and
// scripts/family-speed print it: decode as a ratio to llama.cpp's and to the read-bandwidth probe,
// prefill as a share of the FMA peak (both probes of glass's kernel set): the median of the runs
// over the median of the probe's passes, and "paired": each run over the probe pass taken beside
// it (benchmark.hpp's paired_ratios), the median [range] of those ratios, which a noisy VM moves less.
const rows = fs.readFileSync(0, "utf8").trim().split("\n").map(JSON.parse);
const g0 = rows.find((r) => r.kernels);
console.log(`glass kernels ${g0.kernels} (${g0.isa}); CPU ${g0.cpu}: ${g0.cpu_flags}`);
console.log("| model | engine | weights | activations | decode tok/s median [range] | vs llama.cpp | % of read BW | paired | prefill tok/s (64) | % of FMA peak | paired |");
console.log("|---|---|---|---|---|---|---|---|---|---|---|");
const fmt = (a, b) => `${a.toFixed(2)} [${b[0].toFixed(2)} – ${b[1].toFixed(2)}]`;
const pct = (a, b) => (a === undefined ? "" : `${(100 * a).toFixed(0)} % [${(100 * b[0]).toFixed(0)} – ${(100 * b[1]).toFixed(0)}]`);
for (let i = 0; i < rows.length;) {
  let j = i;
  while (rows[j].kernels) ++j;  // glass rows, then the llama.cpp row of the same file
  const llama = rows[j], shape = llama.model.split("/").pop().replace(/\.gguf$/, "");
  for (const g of rows.slice(i, j))
    console.log(`| ${shape} | glass | ${g.panel_types ?? g.precision} | ${g.dot_products} | ${fmt(g.decode_tokens_per_s, g.decode_tokens_per_s_range)} | ` +
                `${(g.decode_tokens_per_s / llama.decode_tokens_per_s).toFixed(2)}x | ${(100 * g.decode_bandwidth_ratio).toFixed(0)} % | ` +
                `${pct(g.decode_bandwidth_ratio_paired, g.decode_bandwidth_ratio_paired_range)} | ` +
                `${g.prefill_tokens_per_s.toFixed(1)} | ${(100 * g.prefill_fma_ratio).toFixed(0)} % | ` +
                `${pct(g.prefill_fma_ratio_paired, g.prefill_fma_ratio_paired_range)} |`);
  console.log(`| ${shape} | ${llama.engine}, CPU library ${llama.cpu_library} | ${shape.split("-").pop()} | its own | ` +
              `${fmt(llama.decode_tokens_per_s, llama.decode_range)} | 1.00x | | | ${llama.prefill_tokens_per_s.toFixed(1)} | | |`);
  i = j + 1;
}
