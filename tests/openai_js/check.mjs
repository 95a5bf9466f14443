// glass serve checked with the official `openai` npm package (its pinned version: package.json).
//   node check.mjs GLASS_BIN WORK_DIR        (run.sh installs the package and runs this)
// Starts `glass serve --port 0` (three of them: plain, with --api-key, and a slow one with
// --max-queue 1), talks to them only through the SDK, prints one line per check ("ok ..." or
// "FAIL ..."), and exits 1 if any check failed. Expected texts come from `glass generate` with
// the same prompt and settings, run here; nothing is hard-coded. Every call has a timeout, the SDK
// retries nothing (maxRetries 0), and the whole script gives up after 240 s.
import { execFileSync, spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { isDeepStrictEqual } from 'node:util';
import OpenAI from 'openai';

const [glass, work] = process.argv.slice(2);
if (!glass || !work) {
  console.error('usage: node check.mjs GLASS_BIN WORK_DIR');
  process.exit(2);
}
setTimeout(() => {
  console.log('FAIL the checks did not finish within 240 s');
  process.exit(1);
}, 240_000).unref();

let passed = 0;
let failed = 0;
function check(ok, what, detail) {
  if (ok) {
    passed++;
    console.log(`ok   ${what}`);
  } else {
    failed++;
    console.log(`FAIL ${what}${detail === undefined ? '' : `\n     ${JSON.stringify(detail).slice(0, 600)}`}`);
  }
}

// --- the servers -------------------------------------------------------------------------------
const servers = [];
process.on('exit', () => servers.forEach((p) => p.kill('SIGKILL')));

// `glass serve --port 0 ARGS`; resolves with its URL once it prints "listening on URL".
function startServer(args) {
  return new Promise((resolve, reject) => {
    const proc = spawn(glass, ['serve', '--port', '0', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    servers.push(proc);
    let out = '';
    let err = '';
    const timer = setTimeout(() => reject(new Error(`glass serve ${args.join(' ')} did not start in 20 s:\n${err}`)), 20_000);
    proc.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/^listening on (http:\/\/127\.0\.0\.1:\d+)\n/);
      if (m) {
        clearTimeout(timer);
        resolve({ url: m[1], log: () => err });
      }
    });
    proc.stderr.on('data', (d) => { err += d; });
    proc.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`glass serve ${args.join(' ')} exited with ${code}:\n${err}`));
    });
  });
}

function client(url, apiKey = 'unused') {
  return new OpenAI({ baseURL: `${url}/v1`, apiKey, maxRetries: 0, timeout: 30_000 });
}

// `glass generate -p PROMPT FLAGS --json`: its JSON record (the last line).
function generate(prompt, flags) {
  const out = execFileSync(glass, ['generate', '-p', prompt, ...flags, '--json'],
                           { encoding: 'utf8', timeout: 60_000, stdio: ['ignore', 'pipe', 'pipe'] });
  return JSON.parse(out.trim().split('\n').pop());
}

// A llama2.c checkpoint with random weights: tok512's vocabulary, 8 layers of width 384 (a few ms
// per token: a request is surely still running while the next one arrives).
function writeSlowModel(path) {
  const [dim, hidden, layers, heads, kvHeads, vocab, seq] = [384, 1024, 8, 6, 6, 512, 512];
  const headDim = dim / heads;
  const kv = kvHeads * headDim;
  const parts = [];
  const matrix = (count, fanIn) => {
    const a = Math.sqrt(3 / fanIn);  // uniform [-a, a): variance 1 / fan_in
    const m = new Float32Array(count);
    for (let i = 0; i < count; i++) m[i] = a * (2 * Math.random() - 1);
    parts.push(m);
  };
  const filled = (count, value) => parts.push(new Float32Array(count).fill(value));
  matrix(vocab * dim, 4 * dim);             // token embedding
  filled(layers * dim, 1);                  // rms_att
  matrix(layers * dim * dim, dim);          // wq
  matrix(layers * kv * dim, dim);           // wk
  matrix(layers * kv * dim, dim);           // wv
  matrix(layers * dim * dim, dim);          // wo
  filled(layers * dim, 1);                  // rms_ffn
  matrix(layers * hidden * dim, dim);       // w1
  matrix(layers * dim * hidden, hidden);    // w2
  matrix(layers * hidden * dim, dim);       // w3
  filled(dim, 1);                           // rms_final
  filled(seq * headDim, 0);                 // legacy RoPE tables (real, imaginary)
  const header = new Int32Array([dim, hidden, layers, heads, kvHeads, vocab, seq]);  // vocab > 0: shared classifier
  writeFileSync(path, Buffer.concat([header, ...parts].map((p) => Buffer.from(p.buffer))));
}

const chatPrompt = (user) => `User: ${user}\nAssistant:`;  // the chat template (openai_api.hpp)
const maxAbsDiff = (a, b) => Math.max(...a.map((x, i) => Math.abs(x - b[i])));
async function expectError(promise, cls, status, what) {
  try {
    await promise;
    check(false, `${what}: ${cls.name} ${status}`, 'the call succeeded');
    return null;
  } catch (e) {
    check(e instanceof cls && e.status === status, `${what}: ${cls.name} ${status}`,
          { name: e?.constructor?.name, status: e?.status, message: e?.message });
    return e;
  }
}

async function main() {
  const plain = await startServer([]);
  const oa = client(plain.url);

  // Models.
  const models = await oa.models.list();
  check(models.data.length === 1 && models.data[0].id === 'stories260K', 'models.list() names stories260K', models.data);

  // Completions, plain and streamed, greedy: glass generate's text.
  {
    const prompt = 'Lily and Ben went to the park';
    const want = generate(prompt, ['--temperature', '0', '--max-new-tokens', '60']);
    const r = await oa.completions.create({ model: 'stories260K', prompt, max_tokens: 60, temperature: 0 });
    check(r.choices[0].text === want.text, 'completions.create: greedy text equals glass generate', [r.choices[0].text, want.text]);
    check(r.usage.prompt_tokens === want.prompt_tokens && r.usage.completion_tokens === want.generated_ids.length,
          'completions.create: usage counts the prompt and generated tokens', r.usage);
    const stream = await oa.completions.create({ model: 'stories260K', prompt, max_tokens: 60, temperature: 0, stream: true,
                                                 stream_options: { include_usage: true } });
    let text = '';
    let usage = null;
    let finish = null;
    let chunks = 0;
    for await (const chunk of stream) {
      chunks++;
      if (chunk.choices.length) {
        text += chunk.choices[0].text;
        finish = chunk.choices[0].finish_reason ?? finish;
      }
      if (chunk.usage) usage = chunk.usage;
    }
    check(text === want.text, `completions stream (${chunks} chunks): the text equals glass generate`, [text, want.text]);
    check(finish === (want.stop_reason === 'length' ? 'length' : 'stop'), 'completions stream: finish_reason', finish);
    check(usage?.completion_tokens === want.generated_ids.length, 'completions stream: include_usage gives the usage', usage);
  }

  // Chat, plain and streamed: the template's text, one line.
  {
    const user = 'Tell me a story about a dog.';
    const want = generate(chatPrompt(user), ['--temperature', '0', '--max-new-tokens', '80', '--stop', '\n']);
    const body = { model: 'stories260K', messages: [{ role: 'user', content: user }], max_tokens: 80, temperature: 0 };
    const r = await oa.chat.completions.create(body);
    check(r.choices[0].message.role === 'assistant' && r.choices[0].message.content === want.text,
          'chat.completions.create: the reply equals glass generate on the template', [r.choices[0].message, want.text]);
    const stream = await oa.chat.completions.create({ ...body, stream: true });
    let text = '';
    let role = null;
    for await (const chunk of stream) {
      role = chunk.choices[0]?.delta?.role ?? role;
      text += chunk.choices[0]?.delta?.content ?? '';
    }
    check(role === 'assistant' && text === want.text, 'chat stream: the deltas make the same reply', [role, text]);
  }

  // Stop strings: the text ends before the first one, as glass generate's --stop.
  {
    const prompt = 'Once upon a time';
    const want = generate(prompt, ['--temperature', '0', '--max-new-tokens', '100', '--stop', 'park', '--stop', 'Lily']);
    check(want.stop_reason === 'stop_string', 'the stop-string case does reach a stop string (glass generate)', want.stop_reason);
    const r = await oa.completions.create({ prompt, max_tokens: 100, temperature: 0, stop: ['park', 'Lily'] });
    check(r.choices[0].text === want.text && r.choices[0].finish_reason === 'stop', 'completions with stop: text and finish_reason',
          [r.choices[0].text, r.choices[0].finish_reason, want.text]);
    const stream = await oa.completions.create({ prompt, max_tokens: 100, temperature: 0, stop: ['park', 'Lily'], stream: true });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.text ?? '';
    check(text === want.text, 'completions stream with stop: the same text', text);
  }

  // Seed: the same seed gives the same text, glass generate's; another seed another text.
  {
    const prompt = 'The little dog';
    const want = generate(prompt, ['--temperature', '1', '--top-p', '0.9', '--seed', '1234', '--max-new-tokens', '80']);
    const ask = (seed) => oa.completions.create({ prompt, max_tokens: 80, temperature: 1, top_p: 0.9, seed });
    const [a, b, c] = [await ask(1234), await ask(1234), await ask(99)];
    check(a.choices[0].text === want.text, 'seed 1234: the text equals glass generate --seed 1234', [a.choices[0].text, want.text]);
    check(b.choices[0].text === a.choices[0].text, 'seed 1234 twice: the same text');
    check(c.choices[0].text !== a.choices[0].text, 'seed 99: another text');
  }

  // Logprobs, against glass generate --top-logprobs. Its reference session sums float logits in
  // another order than the server's paged backend: a few float ulps (< 3e-5 measured over 200
  // tokens); 1e-4 allows that. (Against the engine itself, exactness is tests/test_serve_http.cpp's.)
  {
    const prompt = 'Lily and Ben went to the park';
    const want = generate(prompt, ['--temperature', '0', '--max-new-tokens', '40', '--top-logprobs', '3']);
    const r = await oa.completions.create({ prompt, max_tokens: 40, temperature: 0, logprobs: 3 });
    const lp = r.choices[0].logprobs;
    check(isDeepStrictEqual(lp.tokens, want.logprobs.map((s) => s.token)), 'completions logprobs: the tokens', lp.tokens);
    const diff = maxAbsDiff(lp.token_logprobs, want.logprobs.map((s) => s.logprob));
    check(diff <= 1e-4, `completions logprobs: token_logprobs within 1e-4 of glass generate (max diff ${diff.toExponential(2)})`);
    const topOk = want.logprobs.every((s, i) => s.top_logprobs.every((t) => Math.abs(lp.top_logprobs[i][t.token] - t.logprob) <= 1e-4));
    check(topOk, 'completions logprobs: top_logprobs {token: logprob} within 1e-4');

    const user = 'Tell me a story about a cat.';
    const wantChat = generate(chatPrompt(user), ['--temperature', '0', '--max-new-tokens', '40', '--top-logprobs', '2', '--stop', '\n']);
    const body = { messages: [{ role: 'user', content: user }], max_tokens: 40, temperature: 0, logprobs: true, top_logprobs: 2 };
    const c = await oa.chat.completions.create(body);
    const content = c.choices[0].logprobs.content;
    check(content.length === c.usage.completion_tokens && content.length === wantChat.logprobs.length,
          'chat logprobs: one entry per generated token', [content.length, c.usage.completion_tokens]);
    check(content.every((e, i) => e.token === wantChat.logprobs[i].token && Math.abs(e.logprob - wantChat.logprobs[i].logprob) <= 1e-4 &&
                              e.top_logprobs.length === 2 && isDeepStrictEqual(e.bytes, [...Buffer.from(e.token)])),
          'chat logprobs: tokens, logprobs within 1e-4, bytes, 2 alternatives each');
    const stream = await oa.chat.completions.create({ ...body, stream: true });
    const streamed = [];
    for await (const chunk of stream) streamed.push(...(chunk.choices[0]?.logprobs?.content ?? []));
    check(isDeepStrictEqual(streamed, content), 'chat stream logprobs: the chunks put together equal the plain answer');
  }

  // Errors surface as the SDK's classes.
  {
    const e = await expectError(oa.completions.create({ prompt: 'x', temperature: 3.5 }), OpenAI.BadRequestError, 400,
                                'temperature 3.5');
    check(e?.param === 'temperature' && /3\.5/.test(e?.message ?? ''), 'BadRequestError names the parameter and the value',
          { param: e?.param, message: e?.message });
    await expectError(oa.completions.create({ prompt: 'x', logprobs: 6 }), OpenAI.BadRequestError, 400, 'logprobs 6');
    await expectError(oa.chat.completions.create({ messages: [{ role: 'user', content: 'x' }], logprobs: true, top_logprobs: 21 }),
                      OpenAI.BadRequestError, 400, 'top_logprobs 21');
    await expectError(oa.completions.create({ model: 'gpt-4o', prompt: 'x' }), OpenAI.NotFoundError, 404, 'an unknown model');
  }
  {
    const locked = await startServer(['--api-key', 'sekrit-123']);
    await expectError(client(locked.url, 'wrong-key').completions.create({ prompt: 'x', max_tokens: 2 }), OpenAI.AuthenticationError,
                      401, '--api-key, wrong key');
    const r = await client(locked.url, 'sekrit-123').completions.create({ prompt: 'Once', max_tokens: 2 });
    check(r.choices.length === 1, '--api-key, right key: answered');
  }
  {
    const modelPath = `${work}/slow_model.bin`;
    writeSlowModel(modelPath);
    const slow = await startServer(['-m', modelPath, '--max-queue', '1', '--threads', '1']);  // the default tokenizer: tok512
    const sc = client(slow.url);
    const stream = await sc.completions.create({ prompt: 'Once upon a time', max_tokens: 400, temperature: 0, ignore_eos: true,
                                                 stream: true });
    const it = stream[Symbol.asyncIterator]();
    const first = await it.next();  // the request is in flight: the queue (1) is full
    check(!first.done, 'slow server: the long stream started');
    const e = await expectError(sc.completions.create({ prompt: 'Once', max_tokens: 2 }), OpenAI.InternalServerError, 503,
                                'a full queue (--max-queue 1)');
    check(e instanceof OpenAI.APIError && e.headers?.get('retry-after') === '1', 'the 503 carries Retry-After: 1',
          e?.headers ? Object.fromEntries(e.headers) : null);
    stream.controller.abort();  // hang up: the server cancels it and frees the place
    let after = null;
    for (let i = 0; i < 50 && !after; i++) {  // the cancel reaches the engine within a step or two
      try {
        after = await sc.completions.create({ prompt: 'Once', max_tokens: 2 });
      } catch (err) {
        if (!(err instanceof OpenAI.InternalServerError)) throw err;
        await new Promise((r) => setTimeout(r, 100));
      }
    }
    check(after?.choices?.length === 1, 'after the stream hung up, the next request is served');
  }
}

try {
  await main();
} catch (e) {
  check(false, 'the checks ran to the end', { error: String(e?.stack ?? e) });
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed === 0 && passed > 0 ? 0 : 1);
