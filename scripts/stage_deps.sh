#!/usr/bin/env bash
# Stages the header-only dependencies from this machine's Debian packages into .deps/, for a
# machine that has a compiler and CMake but no Debian dev packages (the lent GPU machine).
#   scripts/stage_deps.sh [DEST]        (default DEST: <repo>/.deps, gitignored)
#   cmake -S . -B build-x -DBESTOFN_STAGED_DEPS=$PWD/.deps ...   (cmake/Dependencies.cmake)
# Staged: nlohmann-json3-dev, libcli11-dev, libspdlog-dev + libfmt-dev (used header-only there:
# SPDLOG_FMT_EXTERNAL, FMT_HEADER_ONLY) and the GoogleTest sources (googletest), built from source;
# PCRE2, zlib and libcrypto as headers and shared objects; FlashInfer's headers (flashinfer/).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dest=${1:-$root/.deps}

die() { echo "stage_deps.sh: $*" >&2; exit 1; }

for dir in /usr/include/nlohmann /usr/include/CLI /usr/include/spdlog /usr/include/fmt /usr/include/openssl /usr/src/googletest; do
  [[ -d $dir ]] || die "missing $dir (scripts/setup.sh installs the Debian packages)"
done

rm -rf "$dest"
mkdir -p "$dest/include"
cp -a /usr/include/nlohmann /usr/include/CLI /usr/include/spdlog /usr/include/fmt "$dest/include/"
cp -a /usr/src/googletest "$dest/googletest"
# Three compiled libraries, headers and shared objects: PCRE2 (the tokenizer's regex), zlib and
# libcrypto (the datasets' SHA-256). Debian keeps two of OpenSSL's headers in the multiarch folder.
mkdir -p "$dest/lib"
cp -a /usr/include/pcre2.h /usr/include/zlib.h /usr/include/zconf.h /usr/include/openssl "$dest/include/"
cp -a /usr/include/x86_64-linux-gnu/openssl/. "$dest/include/openssl/"
for lib in libpcre2-8.so:libpcre2-8.so.0 libz.so:libz.so.1 libcrypto.so:libcrypto.so.3; do
  dev=${lib%%:*} soname=${lib##*:}  # the build links $dev; the loader looks for $soname (RUNPATH)
  real=$(readlink -f "/usr/lib/x86_64-linux-gnu/$dev") || die "missing /usr/lib/x86_64-linux-gnu/$dev"
  cp "$real" "$dest/lib/$soname"
  ln -sf "$soname" "$dest/lib/$dev"
done

# spdlog header-only includes its -inl.h files, and fmt header-only includes format-inl.h: check
# that Debian shipped every one of them (it splits spdlog into a compiled and a header package).
missing=0
check() { [[ -f $1 ]] || { echo "stage_deps.sh: missing ${1#"$dest"/include/} (included by ${2#"$dest"/include/})" >&2; missing=1; }; }
while IFS= read -r header; do
  while IFS= read -r inc; do
    case $inc in
      spdlog/fmt/bundled/*) ;;                       # spdlog's own fmt copy: removed by Debian, unused
      spdlog/* | fmt/*) check "$dest/include/$inc" "$header" ;;
      *-inl.h | *.h) check "$(dirname "$header")/$inc" "$header" ;;  # "logger-inl.h", relative
    esac
  done < <(grep -oE '^[[:space:]]*#[[:space:]]*include[[:space:]]*("[^"]+"|<(spdlog|fmt)/[^>]+>)' "$header" \
             | sed -E 's/.*[<"]([^>"]+)[>"]/\1/')
done < <(find "$dest/include/spdlog" "$dest/include/fmt" -name '*.h')
for f in fmt/core.h fmt/format.h fmt/format-inl.h spdlog/spdlog-inl.h spdlog/logger-inl.h spdlog/common-inl.h; do
  check "$dest/include/$f" "stage_deps.sh"
done
[[ $missing == 0 ]] || die "incomplete staging in $dest"

# The ../shared files the gpu-labelled tests read (../shared does not travel to the device).
shared=${BESTOFN_SHARED:-$root/../shared}
[[ -f $shared/models/llama-260k/model.safetensors ]] || die "missing $shared/models/llama-260k"
mkdir -p "$dest/shared/models"
cp -a "$shared/models/llama-260k" "$dest/shared/models/"
# test_gpu_devices makes a synthetic model with the real Llama 3 tokenizer.
[[ -f $shared/tokenizers/llama3/tokenizer.json ]] || die "missing $shared/tokenizers/llama3"
mkdir -p "$dest/shared/tokenizers"
cp -a "$shared/tokenizers/llama3" "$dest/shared/tokenizers/"
# device_check.sh's HumanEval throughput run (the 164 prompts, batched across problems).
[[ -f $shared/data/humaneval/HumanEval.jsonl.gz ]] || die "missing $shared/data/humaneval"
mkdir -p "$dest/shared/data"
cp -a "$shared/data/humaneval" "$dest/shared/data/"

# --cascade-attention's FlashInfer headers (cmake/Cuda.cmake looks in $dest/flashinfer): staged now
# by scripts/fetch_flashinfer.sh (the set kernels/cascade_attention.cu includes today: a
# .flashinfer/ of an older checkout may lack some; the wheel is read from its cache, sha256 checked).
"$root/scripts/fetch_flashinfer.sh" "$dest/flashinfer"

# What was staged, for the record.
{
  echo "# staged by scripts/stage_deps.sh on $(date -u +%Y-%m-%dT%H:%M:%SZ) from $(hostname)"
  dpkg-query -W -f '${Package} ${Version}\n' nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev googletest libpcre2-dev zlib1g-dev libssl-dev 2>/dev/null || true
  cat "$dest/flashinfer/MANIFEST"
} > "$dest/MANIFEST"
echo "staged into $dest ($(du -sh "$dest" | cut -f1)):"
cat "$dest/MANIFEST"
