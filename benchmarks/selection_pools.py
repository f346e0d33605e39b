#!/usr/bin/env python3
"""How often each selection strategy (bestofn's --select, issue 46) picks a right program from a pool
with a known answer, against picking at random.

    python3 benchmarks/selection_pools.py --bestofn build/bestofn [--model-samples SAMPLES.jsonl]
                                          [--mutants 4] [--seed 0] [--plus] [--out FILE]

For each of HumanEval's 164 problems (../shared/data, or BESTOFN_SHARED/data) the pool is:
  - the canonical solution;
  - up to --mutants mutants of it: one operator each, deterministic (ast: + and -, * and //,
    < and <=, > and >=, == and !=, `and` and `or`, an integer constant one more), written out
    whole after a `pass` body so that the program redefines the function;
  - with --model-samples (an eval run's samples.jsonl), the model's real candidates for the problem
    (their own logprobs and token counts);
in an order shuffled with --seed (the canonical solution is not first on purpose). With --plus the
pools are judged by HumanEval+ (../shared's HumanEvalPlus), where right means passing the base and
the plus tests: candidates that pass the base tests and fail the plus ones ("plus-only traps", among
the mutants and the model's candidates) are then wrong, and counted. The pool goes
through `bestofn score --select ...` like any samples file: the hidden tests judge every candidate
(a mutant that still passes counts as right), and each strategy picks one candidate per problem
without them. The summary's pass@1 over a pool is exactly the rate of a uniformly random pick.
Candidates without a logprob (the canonical solution and the mutants) have mean logprob 0, above
any real candidate's: `logprob` then favours them, so its row says little here.

Output: one JSON line: the pool sizes, the random-pick rate, selected@1 and the share of the gap
per strategy, the commands.
"""
import argparse
import ast
import copy
import gzip
import json
import os
import random
import subprocess
import sys
import tempfile

SWAPS = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.FloorDiv, ast.FloorDiv: ast.Mult, ast.Lt: ast.LtE, ast.LtE: ast.Lt,
         ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.And: ast.Or, ast.Or: ast.And}


def sites(tree, entry):
    """(kind, node, field) of every mutable operator or int constant inside the entry function, in order."""
    out = []
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef) and fn.name == entry:
            for node in ast.walk(fn):
                if isinstance(node, (ast.BinOp, ast.BoolOp)) and type(node.op) in SWAPS:
                    out.append(node)
                elif isinstance(node, ast.Compare) and node.ops and type(node.ops[0]) in SWAPS:
                    out.append(node)
                elif isinstance(node, ast.Constant) and type(node.value) is int:
                    out.append(node)
    return out


def mutants(prompt, solution, entry, count):
    source = prompt + solution
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    n = len(sites(tree, entry))
    out, seen = [], {ast.unparse(tree)}
    for i in range(n):
        t = copy.deepcopy(tree)
        node = sites(t, entry)[i]
        if isinstance(node, (ast.BinOp, ast.BoolOp)):
            node.op = SWAPS[type(node.op)]()
        elif isinstance(node, ast.Compare):
            node.ops[0] = SWAPS[type(node.ops[0])]()
        else:
            node.value += 1
        text = ast.unparse(t)
        if text in seen:
            continue
        seen.add(text)
        out.append('    pass\n' + text + '\n')
        if len(out) == count:
            break
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--bestofn', default='build/bestofn')
    ap.add_argument('--model-samples', default='')
    ap.add_argument('--mutants', type=int, default=4)
    ap.add_argument('--seed', type=int, default=0)
    ap.add_argument('--plus', action='store_true', help='judge by HumanEval+ (base and plus tests)')
    ap.add_argument('--out', default='')
    a = ap.parse_args()
    shared = os.environ.get('BESTOFN_SHARED', os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'shared'))
    data = os.path.join(shared, 'data')
    problems = [json.loads(l) for l in gzip.open(os.path.join(data, 'humaneval', 'HumanEval.jsonl.gz'), 'rt')]
    model = {}
    if a.model_samples:
        for line in open(a.model_samples):
            r = json.loads(line)
            model.setdefault(r['task_id'], []).append(r)
    rng = random.Random(a.seed)
    rows, sizes = [], []
    for p in problems:
        pool = [{'task_id': p['task_id'], 'completion': p['canonical_solution'], 'kind': 'canonical'}]
        pool += [{'task_id': p['task_id'], 'completion': m, 'kind': 'mutant'} for m in mutants(p['prompt'], p['canonical_solution'], p['entry_point'], a.mutants)]
        pool += [{'task_id': p['task_id'], 'completion': r['completion'], 'kind': 'model', 'logprob': r['logprob'], 'num_tokens': r['num_tokens']}
                 for r in model.get(p['task_id'], [])]
        rng.shuffle(pool)
        sizes.append(len(pool))
        rows += pool
    with tempfile.TemporaryDirectory() as tmp:
        samples = os.path.join(tmp, 'pool.jsonl')
        with open(samples, 'w') as f:
            for r in rows:
                f.write(json.dumps(r) + '\n')
        cmd = [a.bestofn, 'score', samples, '--dataset', 'humaneval+' if a.plus else 'humaneval', '--data-dir', data, '--k', '1', '--json',
               '--out', os.path.join(tmp, 'res.jsonl')]
        for s in ('logprob', 'public', 'cluster', 'public,cluster,logprob'):
            cmd += ['--select', s]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            sys.exit('bestofn score failed: ' + res.stderr[-2000:])
        summary = json.loads(res.stdout)
        kinds = {}
        for line in open(os.path.join(tmp, 'res.jsonl')):
            r = json.loads(line)
            k = kinds.setdefault(r['kind'], {'candidates': 0, 'passed': 0})
            k['candidates'] += 1
            k['passed'] += r['passed']
            if a.plus:
                k['plus_passed'] = k.get('plus_passed', 0) + bool(r.get('plus_passed'))
                k['plus_only_traps'] = k.get('plus_only_traps', 0) + (r['passed'] and not r.get('plus_passed'))
    sel = summary['selection']
    out = {'bench': 'selection_pools', 'problems': sel['problems'], 'pool_size_mean': sum(sizes) / len(sizes), 'kinds': kinds,
           'random_pick': sel['pass_at_1'], 'pass_at_n': sel['pass_at_n'],
           'strategies': {k: {'selected_at_1': v['selected_at_1'], 'gap_closed': v['gap_closed']} for k, v in sel['strategies'].items()},
           'plus': {'random_pick': sel.get('plus_pass_at_1'), 'pass_at_n': sel.get('plus_pass_at_n'),
                    'strategies': {k: {'selected_at_1': v.get('plus_selected_at_1'), 'gap_closed': v.get('plus_gap_closed')}
                                   for k, v in sel['strategies'].items()}} if a.plus else None,
           'mutants_per_problem': a.mutants, 'seed': a.seed, 'model_samples': a.model_samples or None,
           'command': 'python3 benchmarks/selection_pools.py ' + ' '.join(sys.argv[1:])}
    text = json.dumps(out)
    print(text)
    if a.out:
        with open(a.out, 'a') as f:
            f.write(text + '\n')


if __name__ == '__main__':
    main()
