"""Shared by the Python benchmark drivers: JSON-line output, the machine and the commit."""
import gzip
import json
import os
import platform
import subprocess


# The modules the sandbox's zygote imports before it forks candidates (kZygote in
# src/verifier/sandbox.cpp): the benches that measure a fork per candidate import the same.
ZYGOTE_MODULES = ("os sys socket select resource ctypes traceback errno array base64 bisect collections copy "
                  "dataclasses decimal fractions functools hashlib heapq itertools json math operator random re "
                  "statistics string typing").split()


def emit(line, out_file=None):
    """Prints one JSON line (and appends it to out_file when given)."""
    text = json.dumps(line, ensure_ascii=False, separators=(",", ":"))
    print(text, flush=True)
    if out_file is not None:
        out_file.write(text + "\n")
        out_file.flush()


def cpu_model():
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def git_commit(repo):
    try:
        r = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short=12", "HEAD"],
                           capture_output=True, text=True, timeout=10)
        if r.returncode == 0 and r.stdout.strip():
            return r.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return os.environ.get("BESTOFN_COMMIT") or "unknown"  # a copy of the tree may have no .git


def read_jsonl_gz(path):
    """The rows of a .jsonl.gz file (blank lines skipped); None when the file is missing."""
    if not path.is_file():
        return None
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]
