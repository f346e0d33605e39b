#!/usr/bin/env python3
"""Golden outputs of EvalPlus's own sanitizer (evalplus/sanitize.py, EvalPlus 0.3.1, tree-sitter)
for bestofn's sanitizer (include/bestofn/eval/sanitize.h), which must give the same code.

    /usr/bin/python3 -m venv /tmp/ep-venv            # the interpreter bestofn's sandbox runs
    /tmp/ep-venv/bin/pip install evalplus==0.3.1     # brings tree-sitter 0.26.1, tree-sitter-python 0.25.0
    /tmp/ep-venv/bin/python tools/gen_sanitize_golden.py [--runs RUN_DIR ...]

writes tests/data/sanitize_golden.json: each case's text and entry point, and what EvalPlus's
sanitize(text, entrypoint) returns (or the exception it raises). The cases:
- edge: hand-made texts (below), one per shape the sanitizer decides: prose around code, several
  blocks, helpers, decorators, nested definitions, assignments, comments after a body, syntax
  errors, no code, unicode, CRLF, tabs, and texts on which tree-sitter and Python disagree;
- reply / completion: model outputs of bestofn runs (--runs: samples.jsonl of eval runs). A chat
  row's text is its "reply" (bestofn's prompt style) or its "completion" (--prompt-style evalplus:
  the text after the pre-filled "```python"); a base row's is EvalPlus's solution, the prompt
  stripped plus "\\n" plus the completion. Replies are chosen deterministically (by SHA-256 of the
  text), up to --max-per-run per run;
- synthetic: seeded texts made of HumanEval and MBPP code (../shared/data) cut, commented and
  wrapped in prose and fences, and small programs of random top-level statements.
Without --runs, the reply and completion cases of the existing golden are kept (their texts are in
it) and only the expected outputs are recomputed.
"""
import argparse
import gzip
import hashlib
import json
import os
import platform
import random
import re
import sys
from importlib.metadata import version

from evalplus.sanitize import sanitize

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.environ.get("BESTOFN_SHARED", os.path.join(ROOT, "..", "shared"))
OUT = os.path.join(ROOT, "tests", "data", "sanitize_golden.json")

FENCE = "```"
HELPER = "def helper(x):\n    return x * 2\n"
EDGE = [
    ("prose around a fence", "Here is the code:\n" + FENCE + "python\ndef f(x):\n    return helper(x) + 1\n\n" + HELPER + FENCE + "\nIt doubles x and adds one.", "f"),
    ("code then prose, no fence", "def f(x):\n    return x + 1\nThis adds one to x.\nExample: f(1) == 2", "f"),
    ("two blocks, helper in the second", FENCE + "python\ndef f(x):\n    return helper(x)\n" + FENCE + "\nand the helper:\n" + FENCE + "python\n" + HELPER + FENCE, "f"),
    ("two blocks, the longer wins", FENCE + "python\ndef f(x):\n    return 1\n" + FENCE + "\nBetter:\n" + FENCE + "python\nimport math\n\ndef f(x):\n    y = math.sqrt(x)\n    z = y * 2\n    return z\n" + FENCE, "f"),
    ("helper before, unused function after", "import os\nfrom typing import List\n\n" + HELPER + "\ndef f(xs: List[int]) -> int:\n    return sum(helper(x) for x in xs)\n\ndef unused():\n    return 0\n", "f"),
    ("no entry point: everything kept", "import os\n" + HELPER + "\ndef other():\n    return 0\nX = 3\n", ""),
    ("entry point not defined", HELPER + "\ndef other():\n    return helper(1)\n", "f"),
    ("decorated entry point dropped", "import functools\n\n@functools.lru_cache(maxsize=None)\ndef f(n):\n    return n if n < 2 else f(n - 1) + f(n - 2)\n", "f"),
    ("decorated helper dropped", "@staticmethod\ndef helper(x):\n    return x\n\ndef f(x):\n    return helper(x)\n", "f"),
    ("nested definitions", "def f(xs):\n    def key(x):\n        return -x\n    class Box:\n        pass\n    return sorted(xs, key=key)\n", "f"),
    ("function without return dropped", "def f(x):\n    print(x)\n\ndef g(x):\n    return x\n", "f"),
    ("first definition wins", "def f(x):\n    return 1\n\ndef f(x):\n    return 2\n", "f"),
    ("variable then function of one name", "f = 3\n\ndef f(x):\n    return x\n", "f"),
    ("constants the function reaches", "MOD = 10 ** 9 + 7\nUNUSED = 1\nTABLE = [MOD, 2]\n\ndef f(n):\n    return TABLE[0] % n\n", "f"),
    ("assignment forms", "a, b = c\nx.y = z\nx[0] = w\np = q = r\n(t) = 1\nu: int = 5\nv.w: int = s\nk: int\nn += 1\n\ndef f():\n    return a + b + c + z + w + p + t + u + s + k + n\n", "f"),
    ("lambda assigned to the entry point", "f = lambda x: helper(x)\n" + HELPER, "f"),
    ("class the function uses", "class Node:\n    def __init__(self, v):\n        self.v = v\n\ndef f(v):\n    return Node(v).v\n", "f"),
    ("async def", "import asyncio\n\nasync def f(x):\n    await asyncio.sleep(0)\n    return x\n", "f"),
    ("future import dropped", "from __future__ import annotations\nimport math\n\ndef f(x: float) -> float:\n    return math.floor(x)\n", "f"),
    ("main guard and tests dropped", "def f(x):\n    return x + 1\n\nif __name__ == '__main__':\n    print(f(1))\n\nassert f(1) == 2\nprint(f(2))\n", "f"),
    ("comments after a body", "def f(x):\n    if x:\n        return 1\n        # deep\n    # body\n# column 0\n    # after column 0\n\ndef g():\n    return 2  # same line\n  # less than the body\n", ""),
    ("semicolon and comment ending a body", "def f(x): return x;  # done\n# next\n", "f"),
    ("backslash before a comment", "def f(x):\n    return x \\\n# joined\n", "f"),
    ("one-line body, comment after", "def f(x): return x\n    # not in the body\n", "f"),
    ("syntax error in the middle", "def f(x):\n    y = (x +\n    return y\n\ndef g(x):\n    return x * 3\n", "g"),
    ("truncated completion", "def f(xs):\n    total = 0\n    for x in xs:\n        total += x\n    return total\n\ndef g(ys):\n    return [y for y in", "f"),
    ("no code at all", "I cannot help with that.\nPlease ask something else.", "f"),
    ("empty text", "", "f"),
    ("blank lines only", "\n\n   \n", "f"),
    ("one line of code", "def f(x): return x + 1", "f"),
    ("indented first line", "        import re\n        return ''.join(x for x in y)  \n    # (", "f"),
    ("one line that does not parse", "import os; x = (", "f"),
    ("first line ending in a backslash", "import heapq \\\ndef f(items):\ndef g(): return 1;", "f"),
    ("first line ending in a backslash and blanks", "import os \\  \nx = (", "f"),
    ("unicode", "# -*- coding: utf-8 -*-\ndef f(s):\n    \"\"\"Returns s with café, Ünïcode and 🐍.\"\"\"\n    return s + 'é' + \"🐍\"\n\nπ = 3.14159\ndef 函数():\n    return π\n", "f"),
    ("unicode entry point", "π = 3.14159\ndef 函数():\n    return π\n", "函数"),
    ("CRLF line ends", "Here:\r\n" + FENCE + "python\r\ndef f(x):\r\n    return x  # c\r\n    # tail\r\n" + FENCE + "\r\n", "f"),
    ("tabs", "def f(x):\n\tif x:\n\t\treturn 1\n\t# tab comment\n\treturn 0\n", "f"),
    ("match statement", "def f(p):\n    match p:\n        case {'x': x, **rest}:\n            return helper(x)\n        case [a, *more]:\n            return a\n        case Point(x=0):\n            return 0\n" + HELPER, "f"),
    ("try, else, finally", "def f(x):\n    try:\n        y = int(x)\n    except ValueError as err:\n        return None\n    else:\n        return y\n    finally:\n        pass\n        # cleanup\n", "f"),
    ("f-string names", "def f(x):\n    return f'{helper(x)!r:>{WIDTH}}'\n" + HELPER + "WIDTH = 8\n", "f"),
    ("keyword and attribute names", "def f(xs):\n    return sorted(xs, key=helper)\n\ndef key(x):\n    return x\n" + HELPER, "f"),
    ("global and nonlocal", "count = 0\n\ndef f():\n    global count\n    count += 1\n    return count\n", "f"),
    ("several fences and tests", "```python\nimport math\n```\n\n```python\ndef f(x):\n    return math.ceil(x)\n```\n\nTests:\n```python\nassert f(1.5) == 2\n```", "f"),
    ("python3 and tilde fences", "~~~python3\ndef f(x):\n    return x\n~~~", "f"),
    ("Python 2 print", "def f(x):\n    print x\n    return x\n", "f"),
    ("deep parentheses", "x = " + "(" * 250 + "1" + ")" * 250 + "\ndef f():\n    return 1\n", "f"),
    ("long line", "def f():\n    return " + " + ".join(str(i) for i in range(3000)) + "\n", "f"),
    # tree-sitter-python cannot parse these, although Python can: EvalPlus's answer is its error recovery's
    ("tree-sitter: comment in brackets less indented than the block",
     "def f(s):\n    c = 0\n    for i in s:\n        if ((i == 1) or \n  # note\n            (i == 2)):\n            c += 1\n    return c\n", "f"),
    ("tree-sitter: continuation line less indented than the block", "def f():\n    x = (1 or\n   2)\n    return x\n", "f"),
    ("tree-sitter: its error recovery keeps the whole text",
     "\t# tab comment\ndef f(s):\n    c = 0\n    for i in s:\n        if ((i == 1) or\n  # note\n            (i == 2)):\n            c += 1\n    return c", "f"),
    ("tree-sitter: a lone carriage return is no line end to it", "def f(x):\r    return x\r", "f"),
    # EvalPlus raises here (Python 3.11's ast.parse raises ValueError for a NUL, which its syntax check does not catch)
    ("NUL byte", "def f(x):\n    return x\x00\n", "f"),
]

PROSE = ["Here is the solution:", "Sure! Below is the code.", "Explanation:", "1. First we sort.", "Note: O(n).", FENCE, FENCE + "python",
         "Hope this helps!", "Example usage:", "print(f(1))", "assert f(1) == 2", "# test", "    # indented comment", "  # two",
         "\t# tab comment", "", "   ", "if __name__ == '__main__':\n    print(1)", "x = 5", "a, b = c", "import os",
         "from __future__ import annotations", "@decorator", "class Helper:\n    pass", HELPER.rstrip(), "def noret(x):\n    print(x)",
         "café = 'ü'", "x.y = z", "y: int = 3", "def broken(:\n    pass", "return 1", "    return x", "else:", "'''", "\\",
         "def f(): return 1;  # c", "x = 1; y = 2", "try:\n    import numpy\nexcept ImportError:\n    pass"]


def datasets():
    pool = []
    with gzip.open(os.path.join(SHARED, "data", "humaneval", "HumanEval.jsonl.gz"), "rt") as f:
        for line in f:
            r = json.loads(line)
            pool.append((r["prompt"] + r["canonical_solution"], r["entry_point"]))
    with open(os.path.join(SHARED, "data", "mbpp", "sanitized-mbpp.json")) as f:
        for r in json.load(f):
            m = re.search(r"([A-Za-z_]\w*)\s*\(", r["test_list"][0].split("assert", 1)[1])
            pool.append((r["code"], m.group(1) if m else ""))
    return pool


def mutated(rng, code):
    lines = code.split("\n")
    for _ in range(rng.randint(0, 4)):
        k, op = rng.randrange(len(lines) + 1), rng.random()
        if op < 0.5:
            lines.insert(k, rng.choice(PROSE))
        elif op < 0.7 and lines:
            del lines[min(k, len(lines) - 1)]
        elif op < 0.85:
            lines.insert(k, rng.choice(["", "  ", "    ", "        ", "\t"]) + "# note")
        elif lines:
            k = min(k, len(lines) - 1)
            lines[k] += rng.choice(["  # trailing", ";", " \\", " (", "  "])
    return "\n".join(lines)


def wrapped(rng, pool):
    parts, entry = [], None
    for _ in range(rng.randint(1, 4)):
        if rng.random() < 0.55:
            code, e = rng.choice(pool)
            entry = entry or e
            code = mutated(rng, code)
            if rng.random() < 0.5:
                code = FENCE + rng.choice(["python", "py", "", "Python"]) + "\n" + code + "\n" + FENCE
            parts.append(code)
        else:
            parts.append(rng.choice(PROSE))
    text = rng.choice(["\n", "\n\n"]).join(parts)
    if rng.random() < 0.05:
        text = text.replace("\n", "\r\n")
    if rng.random() < 0.05:
        text = text.replace("    ", "\t")
    return text, entry or ""


def program(rng):
    names = ["f", "g", "h", "A", "x", "y"]
    nm = lambda: rng.choice(names)
    expr = lambda: rng.choice([nm(), f"{nm()}.{nm()}", f"{nm()}({nm()}, key={nm()})", f'f"{{{nm()}}}"', f"lambda {nm()}: {nm()}",
                               f"[{nm()} for {nm()} in {nm()}]", str(rng.randint(0, 9))])

    def block(d, depth):
        ind, out = "    " * d, []
        for _ in range(rng.randint(1, 3)):
            r = rng.random()
            if r < 0.2 and depth < 3:
                out.append(ind + rng.choice([f"if {expr()}:", f"for {nm()} in {expr()}:", f"while {expr()}:", f"def {nm()}({nm()}):"]))
                out += block(d + 1, depth + 1)
            elif r < 0.45:
                out.append(ind + f"return {expr()}")
            elif r < 0.6:
                out.append(ind + f"{nm()} = {expr()}")
            elif r < 0.75:
                out.append("    " * rng.randint(0, d + 1) + "# c")
            else:
                out.append(ind + expr() + rng.choice(["", ";", "  # same"]))
        if all(line.strip().startswith("#") for line in out):
            out.append(ind + "pass")
        return out

    lines = []
    for _ in range(rng.randint(1, 6)):
        r = rng.random()
        if r < 0.35:
            lines += (["@" + nm()] if rng.random() < 0.1 else []) + [f"def {nm()}({nm()}, k={expr()}):"] + block(1, 1)
            lines += ["    " * rng.randint(0, 2) + "# t" for _ in range(rng.randint(0, 2))]
        elif r < 0.45:
            lines += [f"class {nm()}({nm()}):"] + block(1, 1)
        elif r < 0.7:
            lines.append(rng.choice([f"{nm()} = {expr()}", f"{nm()}, {nm()} = {expr()}", f"{nm()}.{nm()} = {expr()}", f"({nm()}) = {expr()}",
                                     f"{nm()}: {nm()} = {expr()}", f"{nm()} = {nm()} = {expr()}", f"{nm()} += 1"]))
        elif r < 0.85:
            lines.append(rng.choice([f"import {nm()}", f"from {nm()} import {nm()}", "from __future__ import annotations"]))
        else:
            lines.append(rng.choice(["# top", "", f"print({expr()})"]))
    return "\n".join(lines) + rng.choice(["", "\n"]), rng.choice(["f", "g", "A", ""])


def task_prompts():
    # task id -> (EvalPlus's task prompt, entry point): HumanEval's prompt; MBPP's task and first
    # assert in a docstring (MBPP+'s form), its entry point the first function that assert calls
    # and the code defines
    tasks = {}
    with gzip.open(os.path.join(SHARED, "data", "humaneval", "HumanEval.jsonl.gz"), "rt") as f:
        for line in f:
            r = json.loads(line)
            tasks[r["task_id"]] = (r["prompt"], r["entry_point"])
    with open(os.path.join(SHARED, "data", "mbpp", "sanitized-mbpp.json")) as f:
        for r in json.load(f):
            first = next(t for t in r["test_list"] if t.startswith("assert"))
            called = [n for n in re.findall(r"([A-Za-z_]\w*)\s*\(", first) if re.search(r"^def\s+" + n + r"\s*\(", r["code"], re.M)]
            tasks["Mbpp/%d" % r["task_id"]] = ('"""\n' + r["prompt"] + "\n" + first + '\n"""\n', called[0] if called else "")
    return tasks


def run_cases(run_dirs, max_per_run):
    tasks = task_prompts()
    cases = []
    for d in run_dirs:
        with open(os.path.join(d, "run.json")) as f:
            run = json.load(f)
        evalplus_style = run.get("prompt_style") == "evalplus"
        seen, rows = set(), []
        with open(os.path.join(d, "samples.jsonl")) as f:
            for line in f:
                r = json.loads(line)
                prompt, entry = tasks[r["task_id"]]
                if run["chat"]:
                    source, text = "reply", r["completion"] if evalplus_style else r["reply"]
                else:
                    source, text = "completion", prompt.strip() + "\n" + r["completion"]
                if evalplus_style:
                    text = text.replace("\t", "    ")  # as EvalPlus's providers hand it to sanitize
                if (text, entry) in seen:
                    continue
                seen.add((text, entry))
                rows.append((hashlib.sha256(text.encode("utf-8")).hexdigest(), source, text, entry, r["task_id"]))
        for digest, source, text, entry, task in sorted(rows)[:max_per_run]:
            cases.append({"id": f"{source} {os.path.basename(os.path.normpath(d))} {task} {digest[:12]}", "source": source, "text": text,
                          "entry_point": entry})
    return cases


def expected(case):
    try:
        case["expected"] = sanitize(case["text"], case["entry_point"] or None)
    except Exception as e:  # noqa: BLE001: what EvalPlus raises is the golden
        case["raises"] = f"{type(e).__name__}: {e}"
    return case


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", nargs="*", default=None, help="eval run directories whose samples.jsonl give real texts")
    ap.add_argument("--max-per-run", type=int, default=300)
    ap.add_argument("--synthetic", type=int, default=300, help="cases of each synthetic kind")
    args = ap.parse_args()

    cases = [{"id": f"edge {name}", "source": "edge", "text": text, "entry_point": entry} for name, text, entry in EDGE]
    runs = args.runs
    if args.runs is not None:
        cases += run_cases(args.runs, args.max_per_run)
    elif os.path.exists(OUT):
        with open(OUT) as f:
            old = json.load(f)
        runs = old.get("runs")
        cases += [{k: c[k] for k in ("id", "source", "text", "entry_point")} for c in old["cases"] if c["source"] in ("reply", "completion")]
    rng, pool = random.Random(47), datasets()
    for i in range(args.synthetic):
        text, entry = wrapped(rng, pool)
        cases.append({"id": f"synthetic wrapped {i}", "source": "synthetic", "text": text, "entry_point": entry})
    for i in range(args.synthetic):
        text, entry = program(rng)
        cases.append({"id": f"synthetic program {i}", "source": "synthetic", "text": text, "entry_point": entry})

    golden = {
        "about": "EvalPlus's sanitize(text, entrypoint) on each case (entry_point \"\": None): tools/gen_sanitize_golden.py",
        "command": " ".join(["python", "tools/gen_sanitize_golden.py"] + sys.argv[1:]),
        "runs": runs,  # the eval runs the reply and completion cases come from
        "versions": {"python": platform.python_version(), "evalplus": version("evalplus"), "tree-sitter": version("tree-sitter"),
                     "tree-sitter-python": version("tree-sitter-python")},
        "cases": [expected(c) for c in cases],
    }
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(golden, f, ensure_ascii=False, indent=0)
        f.write("\n")
    print(f"{OUT}: {len(cases)} cases")


if __name__ == "__main__":
    main()
