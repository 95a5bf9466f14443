#!/usr/bin/python3
"""tests/chat/check_templates.py — glass's chat templates against Jinja2, byte for byte.

Usage: check_templates.py GLASS [SHARED_DIR]

Renders every real chat template (SHARED_DIR/templates/*.jinja and the chat_template of
SHARED_DIR/tokenizers/hf/{llama3,qwen3}/tokenizer_config.json) with every conversation in
conversations.json twice: with Jinja2 exactly as Hugging Face's apply_chat_template sets it up
(render_reference.py) and with glass (GLASS is the CLI: `glass chat-template --template FILE
--messages FILE ...`, the command a user runs). Passes when

  - Jinja2 renders and glass prints the same bytes;
  - Jinja2's template calls raise_exception(msg) and glass exits 1 with "glass: error: msg";
  - Jinja2 fails otherwise (a TypeError, an UndefinedError, ...) and glass exits non-zero.

Prints one line per template (how many conversations were identical / refused by both) and the
time glass took per render, a unified diff of the first few differences, and exits 1 on any.
Exit 77 (skipped) when python3-jinja2 is not installed.
"""
import difflib
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from concurrent.futures import ThreadPoolExecutor

try:
    import jinja2  # noqa: F401
except ImportError:
    print("check_templates: python3-jinja2 is not installed; skipped")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from render_reference import TemplateRaised, make_environment, variables_of  # noqa: E402

# Special tokens for the .jinja files (their tokenizer_config.json is not stored with them).
FAMILY_TOKENS = [
    ("meta-llama", "<|begin_of_text|>", "<|eot_id|>"),
    ("NousResearch", "<|begin_of_text|>", "<|im_end|>"),
    ("Qwen", "", "<|im_end|>"),
    ("HuggingFaceTB", "", "<|im_end|>"),
    ("google-gemma", "<bos>", "<eos>"),
    ("mistralai", "<s>", "</s>"),
    ("microsoft-Phi", "<s>", "<|endoftext|>"),
    ("deepseek", "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    ("ibm-granite", "", "<|end_of_text|>"),
    ("openai-gpt-oss", "<|startoftext|>", "<|return|>"),
]


def token_text(token):
    if isinstance(token, dict):  # {"content": "<s>", ...} (AddedToken) in some configs
        return token.get("content", "")
    return token or ""


def load_templates(shared):
    templates = []
    folder = os.path.join(shared, "templates")
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".jinja"):
            continue
        with open(os.path.join(folder, name), encoding="utf-8") as f:
            source = f.read()
        bos, eos = "<|bos|>", "<|eos|>"
        for prefix, b, e in FAMILY_TOKENS:
            if name.startswith(prefix):
                bos, eos = b, e
        templates.append((name, source, bos, eos))
    for family in ("llama3", "qwen3"):
        path = os.path.join(shared, "tokenizers", "hf", family, "tokenizer_config.json")
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
        source = config["chat_template"]
        if isinstance(source, list):  # [{"name": "default", "template": ...}, ...]
            source = next(t["template"] for t in source if t.get("name") == "default")
        templates.append((f"{family}/tokenizer_config.json", source, token_text(config.get("bos_token")),
                          token_text(config.get("eos_token"))))
    return templates


def reference(source, conversation):
    """(status, text): status 'ok', 'raised' (raise_exception) or the exception's class name."""
    env = make_environment(conversation["now"])
    try:
        return "ok", env.from_string(source).render(**variables_of(conversation))
    except TemplateRaised as e:
        return "raised", str(e)
    except Exception as e:  # noqa: BLE001
        return type(e).__name__, str(e)


def write_json(workdir, name, value):
    path = os.path.join(workdir, name)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, ensure_ascii=False)
    return path


def glass_command(glass, template_path, conversation, workdir, key):
    """The `glass chat-template` command line that renders this conversation."""
    now = datetime.fromtimestamp(conversation["now"], tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    command = [glass, "chat-template", "--template", template_path,
               "--messages", write_json(workdir, f"{key}.messages.json", conversation["messages"]),
               "--bos-token", conversation["bos_token"], "--eos-token", conversation["eos_token"], "--now", now,
               "--generation-prompt" if conversation.get("add_generation_prompt", True) else "--no-generation-prompt"]
    if conversation.get("tools") is not None:
        command += ["--tools", write_json(workdir, f"{key}.tools.json", conversation["tools"])]
    for name, value in conversation.get("extra", {}).items():
        command += ["--set", f"{name}={json.dumps(value, ensure_ascii=False)}"]
    return command


def run_glass(glass, template_path, conversation, workdir, key):
    command = glass_command(glass, template_path, conversation, workdir, key)
    start = time.perf_counter()
    result = subprocess.run(command, capture_output=True, timeout=60)
    seconds = time.perf_counter() - start
    return result.returncode, result.stdout.decode("utf-8", "replace"), result.stderr.decode("utf-8", "replace"), seconds


def judge(expected, got):
    """None when glass agrees with Jinja2, else what differs."""
    status, text = expected
    code, out, err, _ = got
    if status == "ok":
        if code != 0:
            return f"Jinja2 rendered, glass exited {code}: {err}"
        return None if out == text else "different text"
    if status == "raised":
        if code != 1:
            return f"Jinja2 raised {text!r}, glass exited {code} ({err or 'rendered'})"
        expected_err = f"glass: error: {text}\n"
        return None if err == expected_err else f"raise_exception message differs: {expected_err!r} vs {err!r}"
    return None if code != 0 else f"Jinja2 failed ({status}: {text}), glass rendered"


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    glass = sys.argv[1]
    shared = sys.argv[2] if len(sys.argv) > 2 else os.path.join(HERE, "..", "..", "..", "shared")
    with open(os.path.join(HERE, "conversations.json"), encoding="utf-8") as f:
        conversations = json.load(f)
    templates = load_templates(shared)
    failures, times, refusal_classes = [], [], {}
    with tempfile.TemporaryDirectory() as workdir, ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        for t_index, (name, source, bos, eos) in enumerate(templates):
            template_path = os.path.join(workdir, f"template{t_index}.jinja")
            with open(template_path, "w", encoding="utf-8") as f:
                f.write(source)
            cases = []
            for c_index, conversation in enumerate(conversations):
                c = dict(conversation, bos_token=bos, eos_token=eos)
                cases.append((c, pool.submit(run_glass, glass, template_path, c, workdir, f"{t_index}_{c_index}")))
            identical = refused = 0
            for c, future in cases:
                expected = reference(source, c)
                got = future.result()
                times.append(got[3])
                problem = judge(expected, got)
                if problem:
                    failures.append((name, c["name"], problem, expected, got))
                elif expected[0] == "ok":
                    identical += 1
                else:
                    refused += 1
                    refusal_classes.setdefault(expected[0], []).append(f"{name} x {c['name']} (glass exit {got[0]})")
            print(f"{name:55s} identical {identical:2d}  both refused {refused:2d}  differ {len(conversations) - identical - refused:2d}")
    print(f"{len(templates)} templates x {len(conversations)} conversations; glass per render (process): "
          f"mean {1000 * sum(times) / len(times):.1f} ms, max {1000 * max(times):.1f} ms")
    for klass, cases in sorted(refusal_classes.items()):
        print(f"refused by both, Jinja2 {klass}: {len(cases)}")
        for case in cases:
            print(f"    {case}")
    for name, conversation, problem, expected, got in failures[:5]:
        print(f"\nFAIL {name} x {conversation}: {problem}")
        if problem == "different text":
            diff = difflib.unified_diff(expected[1].splitlines(keepends=True), got[1].splitlines(keepends=True), "jinja2", "glass")
            sys.stdout.writelines(list(diff)[:60])
    if failures:
        print(f"\n{len(failures)} differences")
        return 1
    print("all identical or refused by both")
    return 0


if __name__ == "__main__":
    sys.exit(main())
