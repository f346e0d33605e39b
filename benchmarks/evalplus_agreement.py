#!/usr/bin/env python3
"""bestofn's `--rules evalplus` against EvalPlus 0.3.1's own evaluator, sample by sample (issue 47).

    python3 benchmarks/evalplus_agreement.py --evalplus-python /tmp/ep-venv/bin/python --bestofn build/bestofn \
        --work /tmp/epa/run [--model-samples .models/runs/smollm2-he-n20-fp8/samples.jsonl] [--parallel 2] \
        [--write-golden tests/data/evalplus_verdicts]

EvalPlus comes from PyPI into a venv (`python3 -m venv /tmp/ep-venv; /tmp/ep-venv/bin/pip install
evalplus==0.3.1`). It downloads HumanEval+ from GitHub unless HUMANEVAL_OVERRIDE_PATH names a file:
this script decompresses ../shared's HumanEvalPlus.jsonl.gz (v0.1.10, the release 0.3.1 asks for)
into WORK and points it there. EvalPlus caches its ground truth in ~/.cache/evalplus.

The corpus (WORK/corpus.jsonl, rebuilt the same every time; the model's samples aside, nothing
random) for HumanEval+'s 164 tasks:
  - canonical: each task's canonical solution (EvalPlus's "solution": the whole code);
  - original: HumanEval's original canonical solution where EvalPlus changed it (a "completion"
    after the prompt): plus-only traps among them;
  - op: up to 2 one-operator mutants per task (selection_pools.py's mutants);
  - wrap-*: the canonical solution wrapped, its output changed mechanically where the task's
    outputs on base_input have the type: a tuple returned as a list and a list as a tuple, floats
    off by a relative 5e-8 (within numpy.allclose's rtol) or an absolute 2e-6 (outside atol 1e-6
    unless |x| >= 10), rounded to 5 digits, returned as numpy.float64, an int as a float (== in
    Python, but not past 2**53), a bool as an int, a wrong output only on large inputs (a plus-only
    trap), an exception on empty input, printing, the input list mutated after the call (which
    EvalPlus's find_zero oracle then reads), sys.exit() in the call, and for find_zero alone a
    wrong answer (0.0) after zeroing the coefficients (which that oracle then passes);
  - model: --model-samples' rows as they are ("solution" where a --prompt-style evalplus run wrote
    one, else "completion" after the prompt).
Then three judges run on it, one after another (no two at once, for the time limits' sake):
EvalPlus 0.3.1 as released; EvalPlus 0.3.1 with its find_zero check patched (below); bestofn
score --rules evalplus. Each sample's base verdict and plus verdict (EvalPlus's: base_status and
plus_status both "pass", as its pass@k counts them; bestofn's: passed, plus_passed) are compared.

0.3.1's bug: for HumanEval/32 (find_zero) its check is `assert abs(_poly(*inp, out)) <= atol;
continue`: the `continue` skips `details[i] = True; progress.value += 1`, so no input is ever
recorded as passed and every find_zero sample fails base and plus. The patched copy
(WORK/patched/evalplus) records the input before the `continue`, and bestofn judges find_zero as
that patched EvalPlus does.

The timing cases run apart (WORK/timing): EvalPlus and bestofn with --min-time-limit 0.2 (not 1 s),
on candidates that sleep well under (0.04 s) or well over (0.6 s) that limit on one input, beside
the canonical solutions (EvalPlus's evaluate wants every task).

--write-golden DIR writes the test's goldens (tests/test_evalplus_agreement.cpp): a fixed choice of
cases with EvalPlus's raw verdicts (base_status and plus_status each, plus run even where base
failed), cases.jsonl (min time limit 1 s) and timing.jsonl (0.2 s).

Output: one JSON line of counts (WORK/counts.json too) and WORK/disagreements.jsonl.
"""
import argparse
import gzip
import json
import os
import random
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from selection_pools import mutants  # noqa: E402

FIND_ZERO_BUG = """                            assert abs(_poly(*inp, out)) <= atol
                            continue
"""
FIND_ZERO_FIX = """                            assert abs(_poly(*inp, out)) <= atol
                            details[i] = True
                            progress.value += 1
                            continue
"""

# Each wrapper: (name, the type of base output it applies to, the lines after `r = _ref(*args)`).
HELPERS = '''
def _bestofn_size(args):
    n = 0
    for a in args:
        if isinstance(a, (list, tuple, str, dict)):
            n = max(n, len(a))
        elif isinstance(a, int) and not isinstance(a, bool):
            n = max(n, abs(a) // 50)
    return n
def _bestofn_wrong(r):
    if isinstance(r, bool):
        return not r
    if isinstance(r, (int, float)):
        return r + 1
    if isinstance(r, str):
        return r + '?'
    if isinstance(r, (list, tuple)):
        return r[:-1] if r else type(r)([0])
    return 0
'''
WRAPS = [
    ('tuple-as-list', 'tuple', 'if type(r) is tuple:\n        r = list(r)'),
    ('list-as-tuple', 'list', 'if type(r) is list:\n        r = tuple(r)'),
    ('float-rel-5e-8', 'float', 'if type(r) is float:\n        r = r * (1 + 5e-8)\n'
     '    elif type(r) in (list, tuple):\n        r = type(r)(x * (1 + 5e-8) if type(x) is float else x for x in r)'),
    ('float-abs-2e-6', 'float', 'if type(r) is float:\n        r = r + 2e-6\n'
     '    elif type(r) in (list, tuple):\n        r = type(r)(x + 2e-6 if type(x) is float else x for x in r)'),
    ('float-round-5', 'float', 'if type(r) is float:\n        r = round(r, 5)\n'
     '    elif type(r) in (list, tuple):\n        r = type(r)(round(x, 5) if type(x) is float else x for x in r)'),
    ('numpy-float', 'float', 'if type(r) is float:\n        import numpy\n        r = numpy.float64(r)'),
    ('int-as-float', 'int', 'if type(r) is int:\n        r = float(r)'),
    ('bool-as-int', 'bool', 'if type(r) is bool:\n        r = int(r)'),
    ('wrong-on-large', 'any', 'if _bestofn_size(args) > 20:\n        r = _bestofn_wrong(r)'),
    ('raise-on-empty', 'any', 'if any(isinstance(a, (list, str)) and len(a) == 0 for a in args):\n        raise ValueError("empty")'),
    ('prints', 'any', 'print("noise " * 50, args)'),
    ('mutates-input', 'listarg', 'for a in args:\n        if type(a) is list:\n            a.reverse()'),
    ('sys-exit', 'any', 'if _bestofn_size(args) > 20:\n        import sys\n        sys.exit(0)'),
    # find_zero only: a wrong answer (0.0) with the coefficients zeroed in place, which EvalPlus's
    # oracle then reads (|poly(0)| over all-zero coefficients is 0).
    ('zeroes-input', 'find_zero', 'args[0][:] = [0] * len(args[0])\n    r = 0.0'),
]

# Where bestofn differs from EvalPlus on purpose: its find_zero oracle evaluates the polynomial on
# the coefficients as the candidate left them (it calls fn(*inp) on its own input list, no copy,
# then reads inp), so a program that changes its argument is judged on another polynomial. bestofn
# judges the answer on the task's own coefficients.
KNOWN_DIFFERENCES = {
    ('HumanEval/32', 'wrap-mutates-input'): "EvalPlus's find_zero oracle reads the coefficients after the candidate reversed them in place",
    ('HumanEval/32', 'wrap-zeroes-input'): "EvalPlus's find_zero oracle reads the coefficients after the candidate zeroed them: a wrong answer passes there",
}


def wrapped(prompt, canonical, entry, body):
    return (prompt + canonical + '\n\n' + HELPERS + '\n_bestofn_ref = ' + entry + '\n\n\ndef ' + entry + '(*args):\n'
            '    r = _bestofn_ref(*args)\n    ' + body + '\n    return r\n')


def base_output_types(problem):
    """The types of the canonical solution's outputs on base_input (and of a list's items), and
    whether an argument is a list: run in a python3 of its own, 60 s at most."""
    prog = (problem['prompt'] + problem['canonical_solution'] + '\nimport json, sys\n'
            'inputs = json.loads(sys.stdin.read())\nts = set()\nlistarg = False\n'
            'for a in inputs:\n    listarg = listarg or any(type(x) is list for x in a)\n'
            '    r = ' + problem['entry_point'] + '(*a)\n    ts.add(type(r).__name__)\n'
            '    if type(r) in (list, tuple):\n        ts.update(type(x).__name__ for x in r)\n'
            'if listarg:\n    ts.add("listarg")\nprint(json.dumps(sorted(ts)))\n')
    res = subprocess.run(['python3', '-c', prog], input=json.dumps(problem['base_input']), capture_output=True, text=True, timeout=60)
    types = set(json.loads(res.stdout)) if res.returncode == 0 else set()
    return types | ({'find_zero'} if problem['entry_point'] == 'find_zero' else set())


def build_corpus(problems, originals, model_rows):
    rows = []
    for p in problems:
        tid, entry = p['task_id'], p['entry_point']
        rows.append({'task_id': tid, 'kind': 'canonical', 'solution': p['prompt'] + p['canonical_solution']})
        o = originals.get(tid)
        if o is not None and o['canonical_solution'].strip() != p['canonical_solution'].strip():
            rows.append({'task_id': tid, 'kind': 'original', 'completion': o['canonical_solution']})
        for i, m in enumerate(mutants(p['prompt'], p['canonical_solution'], entry, 2)):
            rows.append({'task_id': tid, 'kind': 'op', 'solution': p['prompt'] + m})
        types = base_output_types(p) | {'any'}
        # Every wrapper that fits the float tasks, tuples, lists and find_zero; of the generic ones
        # three per task, in an order drawn per task (seeded by its number).
        fits = [w for w in WRAPS if w[1] in types]
        special = [w for w in fits if w[1] != 'any']
        generic = [w for w in fits if w[1] == 'any']
        random.Random(int(tid.split('/')[1])).shuffle(generic)
        for name, _, body in special + generic[:3]:
            rows.append({'task_id': tid, 'kind': 'wrap-' + name, 'solution': wrapped(p['prompt'], p['canonical_solution'], entry, body)})
    for r in model_rows:
        # An --prompt-style evalplus run's rows have the sanitized "solution" (the whole code), as
        # evalplus.codegen writes them; others the "completion" after the prompt.
        code = {'solution': r['solution']} if 'solution' in r else {'completion': r['completion']}
        rows.append(dict({'task_id': r['task_id'], 'kind': 'model'}, **code))
    for i, r in enumerate(rows):
        r['id'] = i
    return rows


# Small inputs, no recursion through the entry point (the wrapper counts the calls).
TIMING_TASKS = ('HumanEval/1', 'HumanEval/6', 'HumanEval/13', 'HumanEval/41')


def timing_corpus(problems):
    """The canonical solutions, and for a few tasks with small fast inputs a candidate that sleeps
    0.04 s on the last base input and on the last plus input (under a 0.2 s limit), and one that
    sleeps 0.6 s there (over it)."""
    rows = [{'task_id': p['task_id'], 'kind': 'canonical', 'solution': p['prompt'] + p['canonical_solution']} for p in problems]
    for p in problems:
        if p['task_id'] not in TIMING_TASKS:
            continue
        n_base, n_plus = len(p['base_input']), len(p['plus_input'])
        for name, sleep in (('sleep-under', 0.04), ('sleep-over', 0.6)):
            body = ('_bestofn_calls.append(1)\n    if len(_bestofn_calls) in (%d, %d):\n        import time\n        time.sleep(%g)'
                    % (n_base, n_plus, sleep))
            code = wrapped(p['prompt'], p['canonical_solution'], p['entry_point'], body).replace('_bestofn_ref = ', '_bestofn_calls = []\n_bestofn_ref = ')
            rows.append({'task_id': p['task_id'], 'kind': 'timing-' + name, 'solution': code})
    for i, r in enumerate(rows):
        r['id'] = i
    return rows


def write_jsonl(path, rows):
    with open(path, 'w') as f:
        for r in rows:
            f.write(json.dumps(r) + '\n')


def run(cmd, env=None, log=None):
    with open(log, 'w') if log else open(os.devnull, 'w') as out:
        res = subprocess.run(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    if res.returncode != 0:
        sys.exit('failed (%d): %s; see %s' % (res.returncode, ' '.join(cmd), log))


def evalplus_verdicts(python, samples, rows, dataset_file, parallel, patched_dir, min_time_limit, log):
    """EvalPlus's evaluate on samples: per row (base_status, plus_status)."""
    result = samples.replace('.jsonl', '_eval_results.json')
    if os.path.exists(result):
        os.remove(result)  # with --i_just_wanna_run it would ask on stdin before overwriting
    env = dict(os.environ, HUMANEVAL_OVERRIDE_PATH=dataset_file)
    if patched_dir:
        env['PYTHONPATH'] = patched_dir
    cmd = [python, '-m', 'evalplus.evaluate', '--dataset', 'humaneval', '--samples', samples, '--parallel', str(parallel), '--i_just_wanna_run',
           '--min_time_limit', str(min_time_limit)]
    run(cmd, env, log)
    ev = json.load(open(result))['eval']
    seen, out = {}, {}
    for r in rows:
        k = seen.get(r['task_id'], 0)
        seen[r['task_id']] = k + 1
        e = ev[r['task_id']][k]
        out[r['id']] = (e['base_status'], e['plus_status'])
    return out, ' '.join(cmd)


def bestofn_verdicts(bestofn, samples, data_dir, work, min_time_limit, workers, log):
    out_file = samples.replace('.jsonl', '_bestofn.jsonl')
    cmd = [bestofn, 'score', samples, '--dataset', 'humaneval+', '--data-dir', data_dir, '--rules', 'evalplus', '--min-time-limit', str(min_time_limit),
           '--reference-times', os.path.join(work, 'reference-times.json'), '--workers', str(workers), '--k', '1', '--out', out_file, '--json']
    run(cmd, None, log)
    return {r['id']: (bool(r['passed']), bool(r.get('plus_passed')), r.get('result', ''), r.get('plus_result', ''))
            for r in map(json.loads, open(out_file))}, ' '.join(cmd)


def compare(rows, stock, patched, ours):
    counts = {'samples': len(rows), 'kinds': {}, 'stock': {'agree_base': 0, 'agree_plus': 0}, 'patched': {'agree_base': 0, 'agree_plus': 0}}
    diffs = []
    for r in rows:
        k = counts['kinds'].setdefault(r['kind'], {'samples': 0, 'base_passed': 0, 'plus_passed': 0, 'plus_only_traps': 0})
        b, p, bres, pres = ours[r['id']]
        k['samples'] += 1
        k['base_passed'] += b
        k['plus_passed'] += p
        k['plus_only_traps'] += b and not p
        for name, ev in (('stock', stock), ('patched', patched)):
            eb = ev[r['id']][0] == 'pass'
            ep = eb and ev[r['id']][1] == 'pass'
            counts[name]['agree_base'] += eb == b
            counts[name]['agree_plus'] += ep == p
            if eb != b or ep != p:
                diffs.append({'evalplus': name, 'id': r['id'], 'task_id': r['task_id'], 'kind': r['kind'],
                              'known': KNOWN_DIFFERENCES.get((r['task_id'], r['kind']), ''), 'evalplus_base': ev[r['id']][0],
                              'evalplus_plus': ev[r['id']][1], 'bestofn_base': b, 'bestofn_plus': p, 'bestofn_result': bres,
                              'bestofn_plus_result': pres})
    for name in ('stock', 'patched'):
        ds = [d for d in diffs if d['evalplus'] == name]
        counts[name]['disagree'] = len(ds)
        counts[name]['disagree_known'] = sum(1 for d in ds if d['known'])
        counts[name]['disagree_by_task_kind'] = {}
        for d in ds:
            key = d['task_id'] + ' ' + d['kind']
            counts[name]['disagree_by_task_kind'][key] = counts[name]['disagree_by_task_kind'].get(key, 0) + 1
    return counts, diffs


# The golden's choice: every disagreement, and per kind the first cases that pass and fail, from
# tasks whose plus inputs are quick, the float, tuple and find_zero tasks first.
GOLDEN_TASKS_FIRST = ['HumanEval/32', 'HumanEval/2', 'HumanEval/4', 'HumanEval/21', 'HumanEval/45', 'HumanEval/47', 'HumanEval/71', 'HumanEval/8',
                      'HumanEval/20', 'HumanEval/107', 'HumanEval/136', 'HumanEval/155', 'HumanEval/148', 'HumanEval/99', 'HumanEval/133']


def choose_golden(rows, patched, diffs, slow_tasks, per_kind=3):
    chosen, ids = [], set()
    for d in diffs:
        if d['id'] not in ids:
            ids.add(d['id'])
    order = sorted(rows, key=lambda r: (r['task_id'] not in GOLDEN_TASKS_FIRST,
                                        GOLDEN_TASKS_FIRST.index(r['task_id']) if r['task_id'] in GOLDEN_TASKS_FIRST else 0, r['id']))
    taken = {}
    for r in order:
        if r['task_id'] in slow_tasks:
            continue
        b, p = patched[r['id']]
        key = (r['kind'], b == 'pass', b == 'pass' and p == 'pass')
        if r['task_id'] in GOLDEN_TASKS_FIRST and r['kind'] != 'model':
            if taken.get(key + (r['task_id'],), 0) < 1:
                taken[key + (r['task_id'],)] = 1
                ids.add(r['id'])
            continue
        if taken.get(key, 0) < per_kind:
            taken[key] = taken.get(key, 0) + 1
            ids.add(r['id'])
    return [r for r in rows if r['id'] in ids and r['task_id'] not in slow_tasks]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--evalplus-python', required=True, help="the venv's python with evalplus==0.3.1")
    ap.add_argument('--bestofn', default='build/bestofn')
    ap.add_argument('--work', required=True, help='a folder for the corpus, the runs and their logs')
    ap.add_argument('--model-samples', default='')
    ap.add_argument('--parallel', type=int, default=2)
    ap.add_argument('--skip-timing', action='store_true')
    ap.add_argument('--write-golden', default='', help='write the test goldens into this folder')
    a = ap.parse_args()
    shared = os.environ.get('BESTOFN_SHARED', os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'shared'))
    data = os.path.abspath(os.path.join(shared, 'data'))
    work = os.path.abspath(a.work)
    os.makedirs(work, exist_ok=True)
    dataset_file = os.path.join(work, 'HumanEvalPlus.jsonl')
    with gzip.open(os.path.join(data, 'humanevalplus', 'HumanEvalPlus.jsonl.gz'), 'rb') as f, open(dataset_file, 'wb') as g:
        g.write(f.read())
    problems = [json.loads(l) for l in open(dataset_file)]
    originals = {p['task_id']: p for p in map(json.loads, gzip.open(os.path.join(data, 'humaneval', 'HumanEval.jsonl.gz'), 'rt'))}
    model_rows = [json.loads(l) for l in open(a.model_samples)] if a.model_samples else []

    # The patched copy of EvalPlus: its package copied, the one check changed.
    src = subprocess.run([a.evalplus_python, '-c', 'import evalplus, os; print(os.path.dirname(evalplus.__file__))'], capture_output=True,
                         text=True, check=True).stdout.strip()
    patched_dir = os.path.join(work, 'patched')
    shutil.rmtree(patched_dir, ignore_errors=True)
    shutil.copytree(src, os.path.join(patched_dir, 'evalplus'))
    init = os.path.join(patched_dir, 'evalplus', 'eval', '__init__.py')
    text = open(init).read()
    if text.count(FIND_ZERO_BUG) != 1:
        sys.exit(init + ": find_zero's check is not 0.3.1's; this script patches evalplus==0.3.1")
    open(init, 'w').write(text.replace(FIND_ZERO_BUG, FIND_ZERO_FIX))

    rows = build_corpus(problems, originals, model_rows)
    samples = {}
    for name in ('stock', 'patched', 'bestofn'):
        os.makedirs(os.path.join(work, name), exist_ok=True)
        samples[name] = os.path.join(work, name, 'corpus.jsonl')
        write_jsonl(samples[name], rows)
    write_jsonl(os.path.join(work, 'corpus.jsonl'), rows)
    stock, stock_cmd = evalplus_verdicts(a.evalplus_python, samples['stock'], rows, dataset_file, a.parallel, '', 1.0,
                                         os.path.join(work, 'stock', 'log.txt'))
    patched, patched_cmd = evalplus_verdicts(a.evalplus_python, samples['patched'], rows, dataset_file, a.parallel, patched_dir, 1.0,
                                             os.path.join(work, 'patched', 'log.txt'))
    ours, ours_cmd = bestofn_verdicts(a.bestofn, samples['bestofn'], data, work, 1.0, a.parallel, os.path.join(work, 'bestofn', 'log.txt'))
    counts, diffs = compare(rows, stock, patched, ours)
    counts['commands'] = {'evalplus': 'HUMANEVAL_OVERRIDE_PATH=' + dataset_file + ' ' + stock_cmd,
                          'evalplus_patched': 'PYTHONPATH=' + patched_dir + ' HUMANEVAL_OVERRIDE_PATH=' + dataset_file + ' ' + patched_cmd,
                          'bestofn': ours_cmd}

    timing_rows = []
    if not a.skip_timing:
        timing_rows = timing_corpus(problems)
        for name in ('timing-evalplus', 'timing-bestofn'):
            os.makedirs(os.path.join(work, name), exist_ok=True)
            write_jsonl(os.path.join(work, name, 'corpus.jsonl'), timing_rows)
        t_ev, t_ev_cmd = evalplus_verdicts(a.evalplus_python, os.path.join(work, 'timing-evalplus', 'corpus.jsonl'), timing_rows, dataset_file,
                                           a.parallel, patched_dir, 0.2, os.path.join(work, 'timing-evalplus', 'log.txt'))
        t_ours, t_ours_cmd = bestofn_verdicts(a.bestofn, os.path.join(work, 'timing-bestofn', 'corpus.jsonl'), data, work, 0.2, a.parallel,
                                              os.path.join(work, 'timing-bestofn', 'log.txt'))
        t_counts, t_diffs = compare(timing_rows, t_ev, t_ev, t_ours)
        counts['timing'] = {'samples': len(timing_rows), 'kinds': t_counts['kinds'], 'agree_base': t_counts['patched']['agree_base'],
                            'agree_plus': t_counts['patched']['agree_plus'], 'disagree': t_counts['patched']['disagree'],
                            'commands': {'evalplus_patched': 'PYTHONPATH=' + patched_dir + ' HUMANEVAL_OVERRIDE_PATH=' + dataset_file + ' ' + t_ev_cmd,
                                         'bestofn': t_ours_cmd}}
        diffs += [dict(d, evalplus='timing') for d in t_diffs if d['evalplus'] == 'patched']

    write_jsonl(os.path.join(work, 'disagreements.jsonl'), diffs)
    json.dump(counts, open(os.path.join(work, 'counts.json'), 'w'), indent=1)
    json.dump({str(k): v for k, v in patched.items()}, open(os.path.join(work, 'patched_verdicts.json'), 'w'))
    print(json.dumps(counts))

    if a.write_golden:
        os.makedirs(a.write_golden, exist_ok=True)
        # Tasks whose plus inputs take the canonical solution over 0.5 s here stay out of the test.
        times = json.load(open(os.path.join(work, 'reference-times.json')))['tasks']
        slow = {t for t, v in times.items() if sum(v.get('plus', [])) + sum(v.get('base', [])) > 0.5}
        cmd = 'python3 benchmarks/evalplus_agreement.py ' + ' '.join(sys.argv[1:])
        for name, rs, verdicts, limit in (('cases', rows, patched, 1.0), ('timing', timing_rows, t_ev if timing_rows else {}, 0.2)):
            if not rs:
                continue
            chosen = choose_golden(rs, verdicts, [d for d in diffs if d['evalplus'] == 'patched'] if name == 'cases' else [], slow,
                                   per_kind=3 if name == 'cases' else 99)
            if name == 'timing':
                chosen = [r for r in chosen if r['kind'] != 'canonical' or r['task_id'] in TIMING_TASKS]
            with open(os.path.join(a.write_golden, name + '.jsonl'), 'w') as f:
                f.write(json.dumps({'about': "EvalPlus 0.3.1's verdicts (its evaluate, find_zero's check patched: benchmarks/evalplus_agreement.py's "
                                             "FIND_ZERO_FIX) on HumanEval+ v0.1.10; base_status and plus_status as its results file has them",
                                    'min_time_limit': limit, 'command': cmd}) + '\n')
                for r in chosen:
                    b, p = verdicts[r['id']]
                    code = r.get('solution') or next(x for x in problems if x['task_id'] == r['task_id'])['prompt'] + r['completion']
                    f.write(json.dumps({'task_id': r['task_id'], 'kind': r['kind'], 'solution': code, 'base_status': b, 'plus_status': p,
                                        'bestofn_differs': KNOWN_DIFFERENCES.get((r['task_id'], r['kind']), ''),
                                        'stock_base_status': stock[r['id']][0] if name == 'cases' else None,
                                        'stock_plus_status': stock[r['id']][1] if name == 'cases' else None}) + '\n')


if __name__ == '__main__':
    main()
