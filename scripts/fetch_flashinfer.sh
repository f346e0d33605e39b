#!/usr/bin/env bash
# Stages the FlashInfer headers kernels/cascade_attention.cu includes (--cascade-attention: the
# paged batch prefill and, for the suffixes, the paged batch decode), and nothing else, from the
# pinned flashinfer-python wheel (Apache-2.0):
#   scripts/fetch_flashinfer.sh [DEST]   (default DEST: <repo>/.flashinfer, gitignored)
# DEST/include (FlashInfer), DEST/cccl (the wheel's CCCL, which cmake/Cuda.cmake puts before the
# toolkit's for that one file), DEST/LICENSE and DEST/MANIFEST. The files are the ones `nvcc -M`
# lists for the .cu (so nvcc is needed: CUDACXX, PATH, or /usr/local/cuda/bin/nvcc). The wheel
# (101 MB) is read from $BESTOFN_FLASHINFER_WHEEL, else from ~/.cache/bestofn/wheels, else downloaded
# from PyPI into that cache (scripts/pypi_wheel.py); its sha256 is checked either way. scripts/setup.sh runs this into
# .flashinfer/, scripts/stage_deps.sh into .deps/flashinfer/ (for the GPU machine, offline).
set -euo pipefail

version=0.7.4
wheel_name=flashinfer_python-$version-py3-none-any.whl
sha256=a051a62e09a2738e8b0de47a1944fd2f0f3eff01b728b662141ea660cb09dd32

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dest=${1:-$root/.flashinfer}
die() { echo "fetch_flashinfer.sh: $*" >&2; exit 1; }

nvcc=${CUDACXX:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
[[ -x $nvcc ]] || die "needs nvcc to list the headers kernels/cascade_attention.cu includes (set CUDACXX)"

if [[ -n ${BESTOFN_FLASHINFER_WHEEL:-} ]]; then
  wheel=$BESTOFN_FLASHINFER_WHEEL
else  # the cache, else PyPI into it (scripts/pypi_wheel.py, which checks the sha256 too)
  wheel=$(python3 "$root/scripts/pypi_wheel.py" flashinfer-python "$version" "$wheel_name" "$sha256") || die "could not get $wheel_name"
fi
got=$(sha256sum "$wheel" | cut -d' ' -f1)
[[ $got == "$sha256" ]] || die "$wheel: sha256 $got, expected $sha256"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 - "$wheel" "$tmp" <<'EOF'
import sys, zipfile
wheel, out = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    names = [n for n in z.namelist()
             if n.startswith(("flashinfer/data/include/flashinfer/", "flashinfer/data/cccl/"))
             or n == "flashinfer_python-0.7.4.dist-info/licenses/LICENSE"]
    z.extractall(out, names)
EOF
data=$tmp/flashinfer/data
incs=(-isystem "$data/cccl/libcudacxx/include" -isystem "$data/include")  # as cmake/Cuda.cmake passes them
(cd "$root" && "$nvcc" -std=c++20 -arch=sm_90a --expt-relaxed-constexpr "${incs[@]}" -Iinclude -Isrc -Ikernels \
   -M kernels/cascade_attention.cu -o "$tmp/deps.d") || die "nvcc -M kernels/cascade_attention.cu failed"
tr ' \\' '\n\n' < "$tmp/deps.d" | grep "^$data/" | sed "s#^$data/##" | sort -u > "$tmp/files"
[[ -s $tmp/files ]] || die "nvcc -M listed no FlashInfer header"

rm -rf "$dest"
mkdir -p "$dest"
(cd "$data" && xargs -a "$tmp/files" cp --parents -t "$dest")
cp "$tmp/flashinfer_python-$version.dist-info/licenses/LICENSE" "$dest/LICENSE"
{
  echo "# staged by scripts/fetch_flashinfer.sh on $(date -u +%Y-%m-%dT%H:%M:%SZ): the headers kernels/cascade_attention.cu includes"
  echo "flashinfer-python $version $wheel_name sha256 $sha256"
  echo "nvcc $("$nvcc" --version | tail -1)"
  echo "files $(wc -l < "$tmp/files")"
} > "$dest/MANIFEST"
echo "fetch_flashinfer.sh: staged $(wc -l < "$tmp/files") files ($(du -sh "$dest" | cut -f1)) into $dest"
