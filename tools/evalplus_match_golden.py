#!/usr/bin/env python3
"""Golden verdicts for `--rules evalplus`'s comparison, from EvalPlus 0.3.1's own checker.

Each case is a tiny task: a reference and a candidate that return given Python values on given
inputs. EvalPlus computes the expected outputs from the reference (evalplus.gen.util.trusted_exec,
as its evaluate does for the ground truth) and judges the candidate (evalplus.eval.untrusted_check,
fail-fast, as its evaluate's default). tests/test_evalplus_rules.cpp runs bestofn's judge on the
same tasks and requires the same verdicts.

EvalPlus 0.3.1 fails every find_zero sample (its check `continue`s past the input before marking it
passed); the find_zero cases are also judged by a copy of the checker with that one line patched
("patched" in the output), which is the verdict bestofn gives.

Usage (a venv with EvalPlus and what its checker imports; numpy's version is recorded):
  python3 -m venv /tmp/ep-golden
  /tmp/ep-golden/bin/pip install --no-deps evalplus==0.3.1 && /tmp/ep-golden/bin/pip install numpy psutil
  cd /tmp && /tmp/ep-golden/bin/python /path/to/tools/evalplus_match_golden.py > tests/data/evalplus_match/cases.jsonl
  cd /tmp && /tmp/ep-golden/bin/python /path/to/tools/evalplus_match_golden.py --conversions > tests/data/evalplus_match/mbpp_inputs.jsonl
(the second: MBPP+'s inputs as evalplus.data.mbpp.mbpp_deserialize_inputs rebuilds them, as repr of
each call's arguments)
"""
import importlib.util
import json
import sys

import numpy
import evalplus
import evalplus.eval as checker
from evalplus.eval._special_oracle import MBPP_OUTPUT_NOT_NONE_TASKS
from evalplus.gen.util import trusted_exec

# name, EvalPlus dataset, entry point, atol, [(args, reference's output, candidate's output)];
# outputs are Python expressions ("raise" makes the function raise).
CASES = [
    ("int equal", "humaneval", "f", 0, [([0], "3", "3")]),
    ("int differs", "humaneval", "f", 0, [([0], "3", "4")]),
    ("float within 1e-6 (atol 0 made 1e-6)", "humaneval", "f", 0, [([0], "1.0", "1.0000005")]),
    ("float beyond 1e-6", "humaneval", "f", 0, [([0], "1.0", "1.00001")]),
    ("int for a float, equal", "humaneval", "f", 0, [([0], "2.0", "2")]),
    ("int for a float, close but not equal: the types differ", "humaneval", "f", 0, [([0], "3.0000001", "3")]),
    ("str for a float", "humaneval", "f", 0, [([0], "1.5", "'1.5'")]),
    ("list of floats close", "humaneval", "f", 0, [([0], "[1.0, 2.0]", "[1.0, 2.0000001]")]),
    ("tuple for a list of floats", "humaneval", "f", 0, [([0], "[1.0, 2.0]", "(1.0, 2.0000001)")]),
    ("list of floats, another length", "humaneval", "f", 0, [([0], "[1.0, 2.0]", "[1.0]")]),
    ("atol set by a float stays for later inputs", "humaneval", "f", 0, [([0], "1.5", "1.5"), ([1], "[1, 2]", "[1, 2.0000001]")]),
    ("the same later input alone: exact", "humaneval", "f", 0, [([1], "[1, 2]", "[1, 2.0000001]")]),
    ("nested floats, atol 0: exact", "humaneval", "f", 0, [([0], "[[1.0, 2.0]]", "[[1.0, 2.0000001]]")]),
    ("nested floats, dataset atol", "humaneval", "f", 1e-3, [([0], "[[1.0, 2.0]]", "[[1.0, 2.0001]]")]),
    ("dataset atol: int expected, float got", "humaneval", "f", 0.01, [([0], "3", "3.005")]),
    ("dataset atol: float expected", "humaneval", "f", 0.01, [([0], "3.0", "3.005")]),
    ("dataset atol: broadcast shapes", "humaneval", "f", 1e-3, [([0], "[[1.0, 1.0]]", "[[1.0]]")]),
    ("dataset atol: ragged", "humaneval", "f", 1e-3, [([0], "[[1.0], [1.0, 2.0]]", "[[1.0], [1.0, 2.0001]]")]),
    ("dataset atol: strings", "humaneval", "f", 1e-3, [([0], "['a']", "['b']")]),
    ("nan is never equal", "humaneval", "f", 0, [([0], "float('nan')", "float('nan')")]),
    ("inf equals inf", "humaneval", "f", 0, [([0], "float('inf')", "float('inf')")]),
    ("a list holding nan", "humaneval", "f", 0, [([0], "[1, float('nan')]", "[1, float('nan')]")]),
    ("tuple for a list of ints", "humaneval", "f", 0, [([0], "(1, 2)", "[1, 2]")]),
    ("dicts equal", "humaneval", "f", 0, [([0], "{1: 2, 'a': [3]}", "{'a': [3], 1: 2}")]),
    ("the candidate raises", "humaneval", "f", 0, [([0], "1", "raise")]),
    ("bool for int", "humaneval", "f", 0, [([0], "1", "True")]),
    ("complex equal", "humaneval", "f", 0, [([0], "1j", "1j")]),
    ("complex close, dataset atol", "humaneval", "f", 1e-3, [([0], "1j", "1.0001j")]),
    ("big ints equal", "humaneval", "f", 0, [([0], "2**70", "2**70")]),
    ("big ints differ", "humaneval", "f", 0, [([0], "2**70", "2**70 + 1")]),
    ("sets equal", "humaneval", "f", 0, [([0], "{1, 2}", "{2, 1}")]),
    ("None", "humaneval", "f", 0, [([0], "None", "None")]),
    ("None for a list", "humaneval", "f", 0, [([0], "[1.0]", "None")]),
    ("float sum exact", "humaneval", "f", 0, [([0], "0.1 + 0.2", "0.30000000000000004")]),
    ("empty lists", "humaneval", "f", 0, [([0], "[]", "[]")]),
    ("ints with a float: not is_floats", "humaneval", "f", 0, [([0], "[1, 2.5]", "[1, 2.5000001]")]),
    ("fail-fast: the second input fails", "humaneval", "f", 0, [([0], "1", "1"), ([1], "2", "3"), ([2], "3", "3")]),
    ("find_zero within atol", "humaneval", "find_zero", 1e-6, [([[1, 2]], "-0.5", "-0.5000001")]),
    ("find_zero beyond atol", "humaneval", "find_zero", 1e-6, [([[1, 2]], "-0.5", "-0.51")]),
    ("MBPP are_equivalent: anything", "mbpp", "are_equivalent", 0, [([1, 2], "True", "False")]),
    ("MBPP are_equivalent: still not an exception", "mbpp", "are_equivalent", 0, [([1, 2], "True", "raise")]),
    ("MBPP sum_div: 0 passes", "mbpp", "sum_div", 0, [([8], "7", "0")]),
    ("MBPP sum_div: another value", "mbpp", "sum_div", 0, [([8], "7", "3")]),
    ("MBPP surface_Area: the oracle's value", "mbpp", "surface_Area", 0, [([3, 4], "33", "35")]),
    ("MBPP surface_Area: neither", "mbpp", "surface_Area", 0, [([3, 4], "33", "34")]),
    ("MBPP surface_Area: a str", "mbpp", "surface_Area", 0, [([3, 4], "33", "'35'")]),
    ("MBPP digit_distance_nums: the oracle's value", "mbpp", "digit_distance_nums", 0, [([123, 256], "0", "7")]),
    ("MBPP digit_distance_nums: another", "mbpp", "digit_distance_nums", 0, [([123, 256], "0", "6")]),
    ("MBPP set-equal task: another order and type", "mbpp", "similar_elements", 0, [([[3, 4], [4, 5]], "(4, 5)", "[5, 4, 4]")]),
    ("MBPP set-equal task: unhashable items", "mbpp", "similar_elements", 0, [([[3, 4], [4, 5]], "(4, 5)", "[[4], [5]]")]),
    ("MBPP set-equal task: other items", "mbpp", "similar_elements", 0, [([[3, 4], [4, 5]], "(4, 5)", "(4,)")]),
    ("MBPP not-None task: a match for a match", "mbpp", "check_str", 0, [(["ab"], "__import__('re').match('a', 'ab')", "__import__('re').match('a', 'ab')")]),
    ("MBPP not-None task: a str for a match", "mbpp", "check_str", 0, [(["ab"], "__import__('re').match('a', 'ab')", "'Valid'")]),
    ("MBPP not-None task: None for a match", "mbpp", "check_str", 0, [(["ab"], "__import__('re').match('a', 'ab')", "None")]),
    ("MBPP not-None task: False for a match", "mbpp", "check_str", 0, [(["ab"], "__import__('re').match('a', 'ab')", "False")]),
    ("MBPP not-None task: False for False", "mbpp", "check_str", 0, [(["ab"], "False", "False")]),
    ("MBPP ordinary task: a list for a tuple", "mbpp", "f", 0, [([1], "(1, 2)", "[1, 2]")]),
    # numpy's scalars, as np.mean and np.sum return them, and an array
    ("numpy float64 for a float, close", "humaneval", "f", 0, [([0], "0.5", "__import__('numpy').float64(0.5000001)")]),
    ("numpy float64 for a float, beyond", "humaneval", "f", 0, [([0], "0.5", "__import__('numpy').float64(0.6)")]),
    ("numpy int64 for an int", "humaneval", "f", 0, [([0], "3", "__import__('numpy').int64(3)")]),
    ("numpy int64 for an int, differs", "humaneval", "f", 0, [([0], "3", "__import__('numpy').int64(4)")]),
    ("numpy bool_ for a bool", "humaneval", "f", 0, [([0], "True", "__import__('numpy').bool_(True)")]),
    ("numpy float64s in a list", "humaneval", "f", 0, [([0], "[1.0, 2.0]", "[__import__('numpy').float64(1.0), __import__('numpy').float64(2.0000001)]")]),
    ("numpy array for a list of ints", "humaneval", "f", 0, [([0], "[1, 2]", "__import__('numpy').array([1, 2])")]),
]


def program(entry, rows, which):
    """A function that returns its given value for each input (keyed by repr of its arguments)."""
    lines = ["_OUT = {}"]
    for args, ref, cand in rows:
        value = ref if which == 0 else cand
        key = repr(repr(tuple(args)))
        if value == "raise":
            lines.append(f"_OUT[{key}] = ValueError('no')")
        else:
            lines.append(f"_OUT[{key}] = {value}")
    lines += [f"def {entry}(*a):", "    v = _OUT[repr(a)]", "    if isinstance(v, ValueError):", "        raise v", "    return v", ""]
    return "\n".join(lines)


def patched_checker():
    """EvalPlus's checker with find_zero's passed input recorded (the one line 0.3.1 misses)."""
    path = checker.__file__
    text = open(path).read()
    old = "assert abs(_poly(*inp, out)) <= atol\n                            continue"
    assert old in text, "the find_zero lines moved: this script knows EvalPlus 0.3.1"
    new = ("assert abs(_poly(*inp, out)) <= atol\n                            details[i] = True\n"
           "                            progress.value += 1\n                            continue")
    spec = importlib.util.spec_from_loader("evalplus_patched_checker", loader=None)
    module = importlib.util.module_from_spec(spec)
    module.__dict__["__name__"] = "evalplus_patched_checker"
    exec(compile(text.replace(old, new), path + " (patched)", "exec"), module.__dict__)
    return module


# MBPP+ inputs that JSON cannot hold, one of each kind EvalPlus rebuilds (and one it leaves alone).
CONVERSIONS = [
    ("Mbpp/2", [[[3, 4, 5], [5, 7]]]),
    ("Mbpp/63", [[[[1, 2], [3, 4]]]]),
    ("Mbpp/75", [[[[1, 2], [3, 4]], 2]]),
    ("Mbpp/106", [[[1, 2], [3, 4]]]),
    ("Mbpp/115", [[[[1], [], [2, 3]]]]),
    ("Mbpp/124", [[1, 2], [0.5, "1+2j"]]),
    ("Mbpp/250", [[[1, 2, 3], 2]]),
    ("Mbpp/259", [[[[1, 2], [3, 4]], [[5, 6], [7, 8]]]]),
    ("Mbpp/278", [[[1, [2, 3], 4]]]),
    ("Mbpp/307", [[[1, 2], 0, 5]]),
    ("Mbpp/722", [[{"a": [1, 2]}, 1, 2]]),
    ("Mbpp/252", [[3], ["1+2j"]]),
    ("Mbpp/580", [[[1, [2, [3]]]]]),
    ("Mbpp/3", [[7919]]),
]


def conversions():
    # evalplus.data imports Hugging Face's datasets at import time; the one function is taken from
    # the module's source instead (it uses nothing else).
    import ast
    import os
    path = os.path.join(os.path.dirname(evalplus.__file__), "data", "mbpp.py")
    tree = ast.parse(open(path).read())
    fn = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "mbpp_deserialize_inputs"]
    scope = {"list": list}
    exec(compile(ast.Module(body=fn, type_ignores=[]), path, "exec"), scope)
    mbpp_deserialize_inputs = scope["mbpp_deserialize_inputs"]
    for task_id, inputs in CONVERSIONS:
        rebuilt = mbpp_deserialize_inputs(task_id, [list(i) if isinstance(i, list) else i for i in inputs])
        print(json.dumps({"task_id": task_id, "inputs": inputs, "args_repr": [repr(tuple(a)) for a in rebuilt]}))


def main():
    if sys.argv[1:] == ["--conversions"]:
        return conversions()
    patched = patched_checker()
    print(f"# evalplus {evalplus.__version__}, numpy {numpy.__version__}, python {sys.version.split()[0]}", file=sys.stderr)
    for name, dataset, entry, atol, rows in CASES:
        ref_code, cand_code = program(entry, rows, 0), program(entry, rows, 1)
        inputs = [args for args, _, _ in rows]
        not_none = dataset == "mbpp" and entry in MBPP_OUTPUT_NOT_NONE_TASKS
        expected, _ = trusted_exec(ref_code, [list(a) for a in inputs], entry, record_time=True, output_not_none=not_none)
        stat, _ = checker.untrusted_check(dataset, cand_code, [list(a) for a in inputs], entry, expected, atol, [0.0] * len(inputs),
                                          fast_check=True)
        row = {"name": name, "dataset": dataset + "+", "entry_point": entry, "atol": atol, "inputs": inputs,
               "reference": ref_code, "candidate": cand_code, "evalplus": stat}
        if entry == "find_zero":
            row["evalplus_patched"] = patched.untrusted_check(dataset, cand_code, [list(a) for a in inputs], entry, expected, atol,
                                                              [0.0] * len(inputs), fast_check=True)[0]
        print(json.dumps(row))


if __name__ == "__main__":
    main()
