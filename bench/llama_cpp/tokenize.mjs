// llama.cpp's tokenization of a text file, special tokens parsed (as llama.cpp tokenizes a chat
// template's prompt), no BOS added: one JSON array of ids on stdout.
//   node tokenize.mjs MODEL.gguf TEXT_FILE
// Only the vocabulary is loaded (vocab-only GGUFs work too). Used by tests/families/run.sh.
import fs from "fs";
import {getLlama, LlamaLogLevel} from "node-llama-cpp";

const [modelPath, textPath] = process.argv.slice(2);
if (!modelPath || !textPath) {
  console.error("usage: node tokenize.mjs MODEL.gguf TEXT_FILE");
  process.exit(2);
}
const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath, vocabOnly: true});
const text = fs.readFileSync(textPath, "utf8");
console.log(JSON.stringify(Array.from(model.tokenize(text, /*specialTokens=*/true))));
