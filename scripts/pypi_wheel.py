#!/usr/bin/env python3
"""Prints the path of a pinned wheel from PyPI, downloading it into a cache first if needed:

    scripts/pypi_wheel.py PACKAGE VERSION FILENAME SHA256

The cache is $XDG_CACHE_HOME/bestofn/wheels (default ~/.cache/bestofn/wheels); a file there or one named by
$BESTOFN_WHEEL_DIR/FILENAME is used as is. The sha256 is checked either way, so a wrong or torn
file is an error, never used. Needs only the standard library (no pip): the file's address comes
from PyPI's JSON API, relative addresses (a mirror's) resolved against it.
"""
import hashlib
import json
import os
import sys
import urllib.parse
import urllib.request
from pathlib import Path


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def wheel(package, version, name, want):
    """The wheel's path in the cache (or $BESTOFN_WHEEL_DIR), downloaded first if absent; exits
    with one line on a download failure or a sha256 mismatch."""
    local = os.environ.get("BESTOFN_WHEEL_DIR")
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "bestofn" / "wheels"
    path = Path(local) / name if local and (Path(local) / name).is_file() else cache / name
    if not path.is_file():
        cache.mkdir(parents=True, exist_ok=True)
        api = f"https://pypi.org/pypi/{package}/json"
        print(f"pypi_wheel.py: downloading {name} from PyPI", file=sys.stderr)
        try:
            meta = json.load(urllib.request.urlopen(api, timeout=60))
            urls = [urllib.parse.urljoin(api, u["url"]) for u in meta["releases"].get(version, []) if u["filename"] == name]
            if not urls:
                sys.exit(f"pypi_wheel.py: PyPI lists no {name} for {package} {version}")
            part = path.with_name(name + ".part")
            urllib.request.urlretrieve(urls[0], part)
        except OSError as e:
            sys.exit(f"pypi_wheel.py: {api}: {e}")
        part.rename(path)
    got = sha256(path)
    if got != want:
        sys.exit(f"pypi_wheel.py: {path}: sha256 {got}, expected {want}")
    return path


def main():
    if len(sys.argv) != 5:
        sys.exit("usage: pypi_wheel.py PACKAGE VERSION FILENAME SHA256")
    print(wheel(*sys.argv[1:]))


if __name__ == "__main__":
    main()
