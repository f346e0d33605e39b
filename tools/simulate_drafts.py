#!/usr/bin/env python3
"""Replays --speculate's drafting on finished candidates, offline: what each draft policy would take.

bestofn's candidates do not depend on --speculate (a drafted token is kept only when it equals the
token the sampler draws there), so the tokens a policy's drafts would have taken can be counted on
the candidates of a plain run: at each step of candidate c, with t[0..m) taken, the policy proposes
d from the prompt, c's siblings (those before c at --batch 1; all of them, as far as they got, when
--batch is larger is not modelled here) and t[0..m); the step takes 1 + the length of the common
prefix of d and t[m..]. This gives tokens per candidate step and the draft rows spent, for any
policy, without rerunning the model; the benchmark (benchmarks/speculate.py) then measures the
chosen one.

  build/bestofn generate ... --ids --out cands.jsonl      (the run to replay; --batch 1 order)
  python3 tools/simulate_drafts.py --candidates cands.jsonl --prompt-ids prompts_ids.jsonl -k 3
"""
import argparse, collections, json, sys


class Index:
    """Documents of token ids (0: the prompt), each appended token indexed by its n-grams."""

    def __init__(self, max_n):
        self.max_n, self.docs = max_n, []

    def add(self, toks):
        self.docs.append([])
        d = len(self.docs) - 1
        for t in toks:
            self.append(d, t)
        return d

    def append(self, d, t):
        doc = self.docs[d]
        doc.append(t)
        nxt = len(doc) - 1
        for n in range(1, min(self.max_n, nxt) + 1):
            self.index(tuple(doc[nxt - n:nxt]), d, nxt)


class Latest(Index):
    """bestofn's DraftIndex at 2026-12-03: the latest occurrence of the longest n-gram (n <= 4)."""

    def __init__(self, max_n=4, min_n=1):
        super().__init__(max_n)
        self.min_n, self.where = min_n, {}

    def index(self, key, d, nxt):
        self.where[key] = (d, nxt)

    def propose(self, ctx, k):
        for n in range(min(self.max_n, len(ctx)), self.min_n - 1, -1):
            w = self.where.get(tuple(ctx[len(ctx) - n:]))
            if w:
                d, nxt = w
                return self.docs[d][nxt:nxt + k]
        return []


class Vote(Index):
    """The continuation most documents agree on: per n-gram, the count of each next token; the draft
    follows the most frequent next token of the longest n-gram seen at least `min_count` times, one
    token at a time (the drafted token extends the context), while its share is at least `share`."""

    def __init__(self, max_n=6, min_n=1, share=0.0, min_count=1):
        super().__init__(max_n)
        self.min_n, self.share, self.min_count = min_n, share, min_count
        self.next = collections.defaultdict(collections.Counter)

    def index(self, key, d, nxt):
        self.next[key][self.docs[d][nxt]] += 1

    def propose(self, ctx, k):
        ctx, out = list(ctx), []
        while len(out) < k:
            pick = None
            for n in range(min(self.max_n, len(ctx)), self.min_n - 1, -1):
                c = self.next.get(tuple(ctx[len(ctx) - n:]))
                if c:
                    total = sum(c.values())
                    tok, cnt = c.most_common(1)[0]
                    if total >= self.min_count and cnt / total >= self.share:
                        pick = tok
                    break
            if pick is None:
                break
            out.append(pick)
            ctx.append(pick)
        return out


def replay(prompts, cands, make, k, max_new, max_ctx=8):
    """cands: {prompt id: [token lists in candidate order]}; --batch 1: candidate c sees 0..c-1 whole."""
    steps = tokens = rows = taken = 0
    for pid, lists in cands.items():
        idx = make()
        idx.add(prompts[pid])
        for toks in lists:
            d = idx.add([])
            m = 0
            # The first token comes from the prefill's logits, not from a step.
            if toks:
                idx.append(d, toks[0])
                m = 1
            while m < len(toks):
                ctx = (prompts[pid] + toks[:m])[-max_ctx:]
                room = min(k, max_new - m - 1)  # as the scheduler: one short of --max-new-tokens
                dr = idx.propose(ctx, room) if room > 0 else []
                a = 0
                while a < len(dr) and m + a < len(toks) and toks[m + a] == dr[a]:
                    a += 1
                gain = 1 + a
                for t in toks[m:m + gain]:
                    idx.append(d, t)
                m += gain
                steps += 1
                tokens += gain
                rows += len(dr)
                taken += a
    return {"tokens": tokens, "steps": steps, "tokens_per_step": tokens / steps, "draft_rows": rows,
            "rows_per_step": rows / steps, "taken": taken, "acceptance": taken / max(rows, 1)}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--candidates", required=True, help="generate --ids output (JSONL)")
    p.add_argument("--prompt-ids", required=True, help="JSONL rows {id, ids}: each prompt's token ids")
    p.add_argument("-k", type=int, default=3)
    p.add_argument("--max-new-tokens", type=int, required=True, help="the run's (drafts stop one short of it)")
    p.add_argument("--problems", type=int, default=0, help="only the first N prompts (0: all)")
    p.add_argument("--truncate", type=int, default=0, help="replay only each candidate's first N tokens (0: all)")
    p.add_argument("--row-cost", type=float, default=0.03, help="a draft row's cost, as a fraction of a one-row step")
    a = p.parse_args()
    try:
        prompts = {}
        for line in open(a.prompt_ids):
            r = json.loads(line)
            prompts[r["id"]] = r["ids"]
        cands = collections.OrderedDict()
        for line in open(a.candidates):
            r = json.loads(line)
            toks = r["token_ids"][: a.truncate] if a.truncate else r["token_ids"]
            if r["id"] in cands or not a.problems or len(cands) < a.problems:
                cands.setdefault(r["id"], []).append(toks)
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.exit(f"simulate_drafts.py: {a.candidates} / {a.prompt_ids}: {type(e).__name__}: {e}")
    if not cands or not prompts:
        sys.exit(f"simulate_drafts.py: {a.candidates} / {a.prompt_ids}: no candidates or no prompts")
    if missing := [pid for pid in cands if pid not in prompts]:
        sys.exit(f"simulate_drafts.py: {a.prompt_ids}: no ids for prompt {missing[0]!r}")
    policies = {
        "latest4": lambda: Latest(4),
        "latest8": lambda: Latest(8),
        "latest4_min2": lambda: Latest(4, 2),
        "vote4": lambda: Vote(4),
        "vote6": lambda: Vote(6),
        "vote8": lambda: Vote(8),
        "vote6_min2": lambda: Vote(6, 2),
        "vote6_share.5": lambda: Vote(6, 1, 0.5),
        "vote6_min2_share.4": lambda: Vote(6, 2, 0.4),
    }
    for k in sorted({a.k, 2, 4, 6, 8}):
        for name, make in policies.items():
            r = replay(prompts, cands, make, k, a.truncate or a.max_new_tokens)
            r["speedup_model"] = r["tokens_per_step"] / (1 + a.row_cost * r["rows_per_step"])
            print(json.dumps({"k": k, "policy": name, **{x: round(y, 3) if isinstance(y, float) else y for x, y in r.items()}}))


if __name__ == "__main__":
    sys.exit(main())
