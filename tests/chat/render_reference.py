#!/usr/bin/python3
"""tests/chat/render_reference.py — the ground truth: one chat template x one conversation rendered
the way Hugging Face's apply_chat_template renders it (transformers' chat template utilities):

    ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    tojson = json.dumps(x, ensure_ascii=False, indent=..., separators=..., sort_keys=...)
    raise_exception(msg) raises; strftime_now(fmt) formats a fixed UTC time.

Usage: render_reference.py TEMPLATE_FILE CONVERSATION_JSON
  CONVERSATION_JSON: {"messages": [...], "tools": [...]?, "add_generation_prompt": bool,
                      "bos_token": str, "eos_token": str, "extra": {...}, "now": unix seconds}
Prints the rendered text exactly (no newline added); exit 0.
The template raised (raise_exception): prints the message to stderr, exit 1.
Any other Jinja2 error: prints "ClassName: message" to stderr, exit 2.
"""
import datetime
import json
import sys

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class TemplateRaised(Exception):
    pass


def make_environment(now_unix_seconds):
    def raise_exception(message):
        raise TemplateRaised(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        moment = datetime.datetime.fromtimestamp(now_unix_seconds, tz=datetime.timezone.utc)
        return moment.strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def variables_of(conversation):
    variables = {
        "messages": conversation["messages"],
        "add_generation_prompt": conversation.get("add_generation_prompt", True),
        "bos_token": conversation.get("bos_token", ""),
        "eos_token": conversation.get("eos_token", ""),
    }
    if conversation.get("tools") is not None:
        variables["tools"] = conversation["tools"]
    variables.update(conversation.get("extra", {}))
    return variables


def main():
    template_path, conversation_path = sys.argv[1], sys.argv[2]
    with open(template_path, encoding="utf-8") as f:
        source = f.read()
    with open(conversation_path, encoding="utf-8") as f:
        conversation = json.load(f)
    env = make_environment(conversation.get("now", 1767225600))
    try:
        text = env.from_string(source).render(**variables_of(conversation))
    except TemplateRaised as e:
        sys.stderr.write(str(e))
        return 1
    except Exception as e:  # noqa: BLE001 — any other failure is reported with its class
        sys.stderr.write(f"{type(e).__name__}: {e}")
        return 2
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
