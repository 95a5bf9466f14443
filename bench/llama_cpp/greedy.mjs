// llama.cpp's greedy continuations of run.c's golden prompts (token ids in, token ids out) on a
// model glass exported (glass export-gguf): how many it reproduces whole, and where the others
// first differ. usage: node greedy.mjs MODEL.gguf GOLDENS.jsonl
import {getLlama, LlamaLogLevel} from "node-llama-cpp";
import fs from "node:fs";
const [model, goldens] = process.argv.slice(2);
const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.warn});
const m = await llama.loadModel({modelPath: model});
let same = 0, total = 0;
for (const line of fs.readFileSync(goldens, "utf8").trim().split("\n")) {
  const g = JSON.parse(line);
  if (g.temperature !== 0 || !g.generated_ids.length) continue;
  // An f32 KV cache, as run.c's (llama.cpp's default is f16).
  const ctx = await m.createContext({contextSize: 256, threads: 1, experimentalKvCacheKeyType: "F32",
                                     experimentalKvCacheValueType: "F32"});
  const seq = ctx.getSequence();
  const out = [];
  for await (const t of seq.evaluate(g.prompt_ids, {temperature: 0})) {
    out.push(t);
    if (out.length >= g.generated_ids.length) break;
  }
  await ctx.dispose();
  total++;
  const ok = JSON.stringify(out) === JSON.stringify(g.generated_ids);
  if (ok) same++;
  else {
    const at = out.findIndex((t, i) => t !== g.generated_ids[i]);
    console.log(`${g.case}: first difference at generated token ${at}: llama.cpp ${out[at]}, run.c ${g.generated_ids[at]}`);
  }
}
console.log(`identical continuations: ${same}/${total}`);
