#!/usr/bin/env python3
"""Goldens for bestofn's built-in chat formats, rendered by Jinja2 from the real templates and
encoded by HF `tokenizers`:

    pip install jinja2 tokenizers
    python3 tools/gen_chat_golden.py > tests/data/chat_golden.json

- Llama 3 Instruct: the chat_template of ../shared/tokenizers/llama3/tokenizer_config.json.
- Llama 2 [INST]: the chat_template that meta-llama/Llama-2-7b-chat-hf publishes in its
  tokenizer_config.json (quoted below), with the Mistral/Llama 2 byte-fallback tokenizer.
Rendering follows transformers' apply_chat_template: a sandboxed Jinja environment with
trim_blocks and lstrip_blocks, add_generation_prompt=True.
"""
import json
import os
import sys

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
shared = os.environ.get("BESTOFN_SHARED", os.path.join(root, "..", "shared"))

LLAMA2_TEMPLATE = (
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
    "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
    "{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if loop.index0 == 0 and system_message != false %}"
    "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
    "{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}"
    "{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
    "{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}")

CASES = [
    ("", "Write a Python function that returns the sum of a list."),
    ("You are a helpful coding assistant.", "Complete the function:\n\ndef add(a, b):\n    \"\"\"Add two numbers.\"\"\"\n"),
    ("  Be terse.  \n", "\n\n  Fix the bug:  x = [1, 2,, 3]\t\n"),
    ("", "Unicode: naïve café — 日本語 🙂"),
    ("System with <|eot_id|> inside", "User with <s> and [INST] inside"),
]


def render(template, messages, bos, eos):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)

    def raise_exception(msg):
        raise jinja2.exceptions.TemplateError(msg)

    env.globals["raise_exception"] = raise_exception
    return env.from_string(template).render(messages=messages, bos_token=bos, eos_token=eos, add_generation_prompt=True)


out = []
for fmt, tok_dir, template, bos, eos in [
    ("llama3", "llama3", json.load(open(os.path.join(shared, "tokenizers/llama3/tokenizer_config.json")))["chat_template"],
     "<|begin_of_text|>", "<|eot_id|>"),
    ("llama2", "mistral", LLAMA2_TEMPLATE, "<s>", "</s>"),
]:
    tok = Tokenizer.from_file(os.path.join(shared, "tokenizers", tok_dir, "tokenizer.json"))
    for system, user in CASES:
        messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": user}]
        text = render(template, messages, bos, eos)
        out.append({"format": fmt, "tokenizer": tok_dir, "system": system, "user": user, "text": text,
                    "ids": tok.encode(text, add_special_tokens=False).ids})
json.dump({"source": "jinja2 %s + tokenizers (tools/gen_chat_golden.py)" % jinja2.__version__, "cases": out},
          sys.stdout, ensure_ascii=False, indent=1)
