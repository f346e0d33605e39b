#!/usr/bin/env python3
"""The dependency rule of bestofn's source tree (docs/architecture.md, "Layers").

Every file under src/<layer>/, include/bestofn/<layer>/ and kernels/ (the CUDA layer's device
code) may include headers of its own layer and of the layers listed for it below, nothing else:
no header of a layer above it or beside it. Prints each include that breaks the rule, as
FILE:LINE: ..., and exits 1 when there is one; run by ctest (test "layers").
"""
import os
import re
import sys

# layer -> the layers it may include (its own is always allowed).
ALLOWED = {
    "util": set(),
    "tokenizer": {"util"},
    "verifier": {"util"},
    "model": {"util", "tokenizer"},
    "engine": {"util", "model"},
    "cpu": {"util", "model", "engine"},
    "cuda": {"util", "model", "engine"},
    "backends": {"util", "model", "engine", "cpu", "cuda"},
    "generate": {"util", "tokenizer", "model", "engine", "backends"},
    "eval": {"util", "tokenizer", "model", "engine", "backends", "generate", "verifier"},
    "cli": {"util", "tokenizer", "model", "engine", "backends", "generate", "eval", "verifier"},
}
SOURCE = (".h", ".cpp", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def layer_of(path):
    """The layer of a repository-relative path, or None for files outside the layered tree."""
    parts = path.split("/")
    if parts[0] == "kernels":
        return "cuda"
    if parts[0] == "src" and len(parts) > 2:
        return parts[1]
    if parts[:2] == ["include", "bestofn"] and len(parts) > 3:
        return parts[2]
    return None


def resolve(root, including, name):
    """The repository-relative file an include names, or None (generated or system headers)."""
    for base in (os.path.dirname(including), "include", "src", "kernels"):
        candidate = os.path.normpath(os.path.join(base, name))
        if os.path.isfile(os.path.join(root, candidate)):
            return candidate
    return None


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    problems, checked = [], 0
    unknown = set()
    for top in ("src", "include", "kernels"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for f in sorted(files):
                if not f.endswith(SOURCE):
                    continue
                path = os.path.relpath(os.path.join(dirpath, f), root)
                layer = layer_of(path)
                if layer is None:
                    problems.append(f"{path}: outside every layer folder (src/<layer>/, include/bestofn/<layer>/)")
                    continue
                if layer not in ALLOWED:
                    unknown.add(layer)
                    continue
                checked += 1
                with open(os.path.join(root, path), encoding="utf-8") as fh:
                    for lineno, line in enumerate(fh, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        target = resolve(root, path, m.group(1))
                        other = layer_of(target) if target else None
                        if other is None or other == layer or other in ALLOWED[layer]:
                            continue
                        problems.append(f"{path}:{lineno}: the {layer} layer includes {target} of the {other} layer")
    for layer in sorted(unknown):
        problems.append(f"src/{layer}/: a layer tools/check_layers.py does not know (add it to ALLOWED)")
    for p in problems:
        print(p)
    print(f"check_layers: {checked} files, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
