// families.mjs — llama.cpp's view of one GGUF file: what it loads, its greedy continuation of a
// prompt given as token ids, and (with --logits) the full logits vectors, as the reference for
// glass's family loaders (the files come from scripts/make-family-models).
//
// usage: node bench/llama_cpp/families.mjs MODEL.gguf PROMPT_IDS_JSON N_GREEDY [--logits]
//             [--follow IDS_JSON] [--tokenize TEXT] [--threads N]
//        node bench/llama_cpp/families.mjs --each LIST_JSON N_GREEDY [--logits] [--threads N]
//   --each LIST      many files in one process (node and llama.cpp start once, ~1.2 s saved per
//                    file): LIST is a JSON file [{"model", "prompt", "out"}, ...]; each file's
//                    object goes to its "out" file instead of stdout
//   PROMPT_IDS_JSON  a JSON array ("[1,450,2030]") or a file holding one (or an object with
//                    "prompt_ids", e.g. a <family>-reference.json)
//   N_GREEDY         greedy steps after the prompt; ids go in as they are (no BOS is added)
//   --logits         the logits after the prompt and after each of the N_GREEDY steps
//                    (N_GREEDY + 1 vectors of n_vocab numbers, float32 values as llama.cpp has them)
//   --follow IDS     feed these ids after the prompt instead of llama.cpp's own greedy picks
//                    (teacher forcing: logits along someone else's path); greedy_ids stays argmax
//   --tokenize TEXT  also report llama.cpp's tokenization of TEXT (no BOS, specials not parsed)
//   --threads N      CPU threads (default 1)
// Prints one JSON object. A file llama.cpp refuses gives {"loaded": false, "error", "llama_cpp_log"}
// and exit status 1.
//
// How: node-llama-cpp's LlamaContextSequence.controlledEvaluate with generateNext {token, logits}.
// With temperature 0 its sampler chain is llama.cpp's greedy sampler alone, which only selects;
// so the logits it hands back are llama_get_logits_ith's, untouched (llama/addon/AddonSampler.cpp
// setTokenCandidates, AddonContext.cpp SampleToken). Flash attention off, an f32 KV cache.
import {getLlama, LlamaLogLevel} from "node-llama-cpp";
import fs from "node:fs";

const args = process.argv.slice(2);
const flag = (name) => {
  const i = args.indexOf(name);
  if (i < 0) return undefined;
  const v = args[i + 1];
  args.splice(i, 2);
  return v;
};
const wantLogits = args.includes("--logits");
if (wantLogits) args.splice(args.indexOf("--logits"), 1);
const followArg = flag("--follow");
const tokenizeText = flag("--tokenize");
const threads = Number(flag("--threads") ?? 1);
const eachArg = flag("--each");
const [modelArg, promptArg, nArg] = eachArg ? [null, null, args[0]] : args;
if ((!eachArg && (!modelArg || !promptArg)) || nArg === undefined) {
  console.error("usage: node families.mjs MODEL.gguf PROMPT_IDS_JSON N_GREEDY [--logits] [--follow IDS_JSON] " +
                "[--tokenize TEXT] [--threads N]\n       node families.mjs --each LIST_JSON N_GREEDY [--logits] [--threads N]");
  process.exit(2);
}
const readIds = (arg, what) => {
  let v = JSON.parse(arg.trim().startsWith("[") ? arg : fs.readFileSync(arg, "utf8"));
  if (!Array.isArray(v)) v = v.prompt_ids;
  if (!Array.isArray(v) || !v.every(Number.isInteger)) throw new Error(`${what}: not a JSON array of token ids`);
  return v;
};
const nGreedy = Number(nArg);
const follow = followArg ? readIds(followArg, "--follow") : null;
if (follow && follow.length < nGreedy) throw new Error(`--follow has ${follow.length} ids, N_GREEDY is ${nGreedy}`);

const pkg = JSON.parse(fs.readFileSync(new URL("./node_modules/node-llama-cpp/package.json", import.meta.url)));
const logs = [];
const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.warn,
                              logger: (level, message) => logs.push(`${level}: ${message.trim()}`)});
const version = `llama.cpp ${llama.llamaCppRelease.release} (node-llama-cpp ${pkg.version}, ${llama.buildType} CPU binaries)`;

// One file: its object (loaded: false and llama.cpp's log when it refuses the file).
async function evaluate(modelPath, prompt) {
  logs.length = 0;
  const out = {model: modelPath, llama_cpp_version: version};
  const t0 = performance.now();
  let model;
  try {
    model = await llama.loadModel({modelPath, gpuLayers: 0});
  } catch (e) {
    return Object.assign(out, {loaded: false, error: String(e?.message ?? e), llama_cpp_log: [...logs]});
  }
  const tLoad = performance.now();
  const nVocab = model.fileInfo.metadata?.tokenizer?.ggml?.tokens?.length;
  const kvType = "F32";
  const ctx = await model.createContext({
    contextSize: Math.max(64, prompt.length + nGreedy + 8), batchSize: Math.max(64, prompt.length),
    threads, flashAttention: false, experimentalKvCacheKeyType: kvType, experimentalKvCacheValueType: kvType});
  const seq = ctx.getSequence();

  // One controlledEvaluate per step: the prompt (asking for the next token at its last id), then
  // each fed id. Logits come back as a Map sorted by value; they are laid out by token id here.
  const next = {generateNext: {token: true, logits: wantLogits}};
  const greedy = [], logits = [];
  let input = prompt.map((t, i) => (i === prompt.length - 1 ? [t, next] : t));
  const steps = wantLogits ? nGreedy + 1 : nGreedy;
  for (let step = 0; step < steps; ++step) {
    const res = await seq.controlledEvaluate(input);
    const n = res[input.length - 1]?.next;
    if (n?.token == null) throw new Error(`${modelPath}: no token came back at step ${step}`);
    if (wantLogits) {
      const row = new Array(n.logits.size);
      for (const [id, v] of n.logits) row[id] = v;
      logits.push(row);
    }
    if (step < nGreedy) greedy.push(n.token);
    input = [[follow ? follow[step] : n.token, next]];
  }
  const tEval = performance.now();

  Object.assign(out, {
    loaded: true, architecture: model.fileInfo.metadata?.general?.architecture, n_vocab: nVocab ?? logits[0]?.length,
    bos: model.tokens.bos, eos: model.tokens.eos, eot: model.tokens.eot,
    prompt_ids: prompt, greedy_ids: greedy, ...(follow ? {followed_ids: follow.slice(0, nGreedy)} : {}),
    settings: {flash_attention: false, kv_cache_type: kvType, threads, context_size: ctx.contextSize,
               batch_size: ctx.batchSize, sampler: "greedy (llama_sampler_init_greedy)"},
    load_ms: Math.round(tLoad - t0), eval_ms: Math.round(tEval - tLoad),
    llama_cpp_warnings: logs.filter((l) => !/^(info|debug)/.test(l)),
  });
  if (tokenizeText !== undefined) out.tokenized = {text: tokenizeText, ids: model.tokenize(tokenizeText, false)};
  if (wantLogits) {
    out.logits_note = "logits[0] after the prompt, logits[i] after greedy step i (llama_get_logits_ith, raw)";
    out.logits = logits;
  }
  await ctx.dispose();
  await model.dispose();
  return out;
}

if (!eachArg) {
  const out = await evaluate(modelArg, readIds(promptArg, "PROMPT_IDS_JSON"));
  console.log(JSON.stringify(out));
  process.exit(out.loaded ? 0 : 1);
}
// --each: every file, then exit 1 naming the files llama.cpp refused (their objects are in their out files).
const list = JSON.parse(fs.readFileSync(eachArg, "utf8"));
if (!Array.isArray(list) || !list.every((e) => e.model && e.prompt && e.out))
  throw new Error(`${eachArg}: not a JSON array of {"model", "prompt", "out"}`);
const refused = [];
for (const e of list) {
  const out = await evaluate(e.model, readIds(e.prompt, `${e.model}'s prompt`));
  fs.writeFileSync(e.out, JSON.stringify(out) + "\n");
  if (!out.loaded) refused.push(e.model);
}
if (refused.length) {
  console.error(`llama.cpp refused ${refused.length} file(s): ${refused.join(", ")}`);
  process.exit(1);
}
