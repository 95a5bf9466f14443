// llama.cpp's prefill and decode speed on a GGUF file, timed as `glass bench` times glass:
// a prompt of P token ids, then G greedy decode steps; medians over R runs.
// usage: node decode_bench.mjs MODEL.gguf THREADS P G R [VOCAB]   (VOCAB: the prompt's ids stay below it; default 32000)
import {getLlama, LlamaLogLevel} from "node-llama-cpp";
import fs from "node:fs";
const pkg = (name) => JSON.parse(fs.readFileSync(new URL(`./node_modules/${name}/package.json`, import.meta.url)));
const [model, threads, P, G, R, V] = process.argv.slice(2);
const [nThreads, promptLen, gen, runs, vocab] = [threads, P, G, R, V ?? 32000].map(Number);
const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});
const m = await llama.loadModel({modelPath: model});
const prompt = Array.from({length: promptLen}, (_, i) => 259 + (i * 7919) % Math.min(20000, vocab - 259));  // fixed ids past the byte tokens
const median = (a) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)];
const prefill = [], decode = [], steps = [];
for (let r = -1; r < runs; ++r) {  // run -1 warms up (pages of the mapped file, thread pool): not counted
  const ctx = await m.createContext({contextSize: promptLen + gen + 16, threads: nThreads, batchSize: promptLen});
  const seq = ctx.getSequence();
  const t0 = performance.now();
  let t1 = 0, n = 0;
  // yieldEogToken: go on past an end-of-generation token, as glass bench does (a random-weight
  // model may pick one within a few steps; the evaluation would otherwise stop there).
  for await (const _ of seq.evaluate(prompt, {temperature: 0, yieldEogToken: true})) {
    if (++n === 1) t1 = performance.now();
    if (n === gen + 1) break;
  }
  const t2 = performance.now();
  // The rate divides by the steps that ran (decode_steps reports them), never by those asked for.
  if (r >= 0) {
    prefill.push(promptLen / ((t1 - t0) / 1e3));
    if (n > 1) decode.push((n - 1) / ((t2 - t1) / 1e3));
    steps.push(n - 1);
  }
  await ctx.dispose();
}
// The CPU libraries ggml could pick from (scripts/llama-cpp-compare leaves one for LLAMA_CPU_VARIANT).
const bins = new URL("./node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/", import.meta.url);
const cpuLibraries = fs.existsSync(bins) ? fs.readdirSync(bins).filter((f) => /^libggml-cpu-.*\.so$/.test(f))
                                              .map((f) => f.slice(12, -3)) : [];
const release = JSON.parse(fs.readFileSync(new URL("./node_modules/node-llama-cpp/llama/llama.cpp.info.json", import.meta.url))).tag;
console.log(JSON.stringify({engine: `llama.cpp ${release} (node-llama-cpp ${pkg("node-llama-cpp").version}, prebuilt CPU binaries)`,
  cpu_library: cpuLibraries.length === 1 ? cpuLibraries[0] : "its pick of " + cpuLibraries.length,
  model, threads: nThreads, prompt_len: promptLen, gen, runs,
  prefill_tokens_per_s: median(prefill), prefill_range: [Math.min(...prefill), Math.max(...prefill)],
  decode_tokens_per_s: decode.length ? median(decode) : null, decode_range: [Math.min(...decode), Math.max(...decode)],
  decode_steps: [Math.min(...steps), Math.max(...steps)]}));
