#!/usr/bin/env python3
"""Golden prompts of EvalPlus 0.3.1 for `bestofn eval --prompt-style evalplus`, made by EvalPlus's
own code: the chat prompt by evalplus.provider.utility.make_raw_chat_prompt on a transformers
tokenizer whose chat template is a real one, the prefixes read out of evalplus/codegen.py's
run_codegen, the stop strings from evalplus.provider.utility (EOS, extra_eos_for_direct_completion)
and the chat stop "\\n```\\n" that its hf and vllm providers add; the ids are the tokenizer's
encode(prompt), which both providers do (special tokens added).

    /usr/bin/python3 -m venv /tmp/ep-venv
    /tmp/ep-venv/bin/pip install evalplus==0.3.1 jinja2    # transformers 5.25.0, tokenizers 0.23.3 came with it
    /tmp/ep-venv/bin/python tools/gen_evalplus_prompt_golden.py

writes tests/data/evalplus_prompt_golden.json. Inputs: ../shared (BESTOFN_SHARED):
data/humaneval/HumanEval.jsonl.gz, data/mbpp/sanitized-mbpp.json, tokenizers/llama3; and the
templates of tests/data/chat_templates. An MBPP problem's task prompt is MBPP+'s form: the task
and its first assert in a docstring.
"""
import ast
import gzip
import inspect
import json
import os
import platform
from importlib.metadata import version

import evalplus.codegen
from evalplus.provider.utility import EOS, extra_eos_for_direct_completion, make_raw_chat_prompt
from transformers import AutoTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.environ.get("BESTOFN_SHARED", os.path.join(ROOT, "..", "shared"))
OUT = os.path.join(ROOT, "tests", "data", "evalplus_prompt_golden.json")
TEMPLATES = ["llama3.jinja", "smollm2.jinja", "qwen2.5.jinja"]


def prefixes():
    # run_codegen's default instruction_prefix and response_prefix: its first assignments to them
    found = {}
    for node in ast.walk(ast.parse(inspect.getsource(evalplus.codegen.run_codegen))):
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.Constant):
            found.setdefault(node.targets[0].id, node.value.value)
    return found["instruction_prefix"], found["response_prefix"]


def problems():
    with gzip.open(os.path.join(SHARED, "data", "humaneval", "HumanEval.jsonl.gz"), "rt") as f:
        he = [json.loads(line) for line in f]
    with open(os.path.join(SHARED, "data", "mbpp", "sanitized-mbpp.json")) as f:
        mbpp = json.load(f)
    m = mbpp[0]
    first = next(t for t in m["test_list"] if t.startswith("assert"))
    return [("humaneval", he[2]["task_id"], he[2]["prompt"]),
            ("mbpp", "Mbpp/%d" % m["task_id"], '"""\n' + m["prompt"] + "\n" + first + '\n"""\n')]


def main():
    instruction, response = prefixes()
    tok = AutoTokenizer.from_pretrained(os.path.join(SHARED, "tokenizers", "llama3"), use_fast=False)
    own = tok.chat_template
    cases = []
    for dataset, task_id, task_prompt in problems():
        prompt = task_prompt.strip() + "\n"  # codegen(): what a direct-completion model is given
        cases.append({"dataset": dataset, "task_id": task_id, "chat": False, "template": None, "prompt": prompt,
                      "ids": tok.encode(prompt), "stop": list(EOS) + extra_eos_for_direct_completion(dataset)})
        for name in TEMPLATES:
            with open(os.path.join(ROOT, "tests", "data", "chat_templates", name)) as f:
                tok.chat_template = f.read()
            text = make_raw_chat_prompt(task_prompt, instruction, response, tok)
            case = {"dataset": dataset, "task_id": task_id, "chat": True, "template": name, "prompt": text, "stop": list(EOS) + ["\n```\n"]}
            if tok.chat_template == own:
                case["ids"] = tok.encode(text)
            cases.append(case)
        tok.chat_template = own
    golden = {
        "about": "EvalPlus 0.3.1's prompts, stop strings and prompt ids: tools/gen_evalplus_prompt_golden.py",
        "versions": {"python": platform.python_version(), "evalplus": version("evalplus"), "transformers": version("transformers"),
                     "tokenizers": version("tokenizers"), "jinja2": version("jinja2")},
        "instruction_prefix": instruction,
        "response_prefix": response,
        "cases": cases,
    }
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(golden, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{OUT}: {len(cases)} cases")


if __name__ == "__main__":
    main()
