#!/usr/bin/env bash
# Builds, here, every binary benchmarks/device_check.sh runs on the GPU machine, and packs them with
# what ctest needs into .deps/device-bin.tar.xz, which the device run carries (carry=[".deps"]): the
# device then spends seconds unpacking instead of 90-150 s building (docs/development.md, "The
# device check"). No GPU needed.
#   bash benchmarks/device_bundle.sh [-j JOBS]
# 1. scripts/stage_deps.sh if .deps/ lacks its staging (the fallback build on the device needs it);
# 2. build-device/: Release, sm_90a, the staged dependencies, no -march=native (BESTOFN_NATIVE=OFF:
#    the device's CPU is another; the CPU GEMMs dispatch AVX2 / AVX-512 at run time), libstdc++ and
#    libgcc linked statically (the device's g++ 13.3 lives in /opt/gcc, not on the loader's path);
# 3. the targets of benchmarks/device_targets.txt, then ctest's test lists discovered here (the
#    GoogleTest discovery script copied into the bundle: the device's CMake is elsewhere);
# 4. checks: every binary's libraries resolve here, none outside glibc, the CUDA toolkit
#    (libcudart; cuBLAS is loaded at run time from the toolkit) and .deps/lib (RUNPATH), and no
#    glibc symbol newer than the device's 2.39;
# 5. packs them, with BUNDLE (the commit, the sources' digest, how it was made), into
#    .deps/device-bin.tar.xz, and checks that the tree plus .deps stay under the 64 MiB a device
#    run may carry.
# The device's tree lands at this same absolute path, so the CTest files' and RUNPATHs' absolute
# paths hold there. Rebuild the bundle after every change the check should see: device_check.sh
# compares its commit and sources' digest with the tree it runs in, and builds there if they differ.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
# shellcheck source=benchmarks/device_check_lib.sh
source benchmarks/device_check_lib.sh

jobs=$(nproc)
if [[ ${1:-} == -j ]]; then jobs=$2; fi
build="build-device"
bundle=.deps/device-bin.tar.xz
targets=benchmarks/device_targets.txt
die() { echo "device_bundle.sh: $*" >&2; exit 1; }
t_start=$(date +%s)

# 1. The staging (scripts/stage_deps.sh starts .deps/ afresh, so before the bundle is written).
if [[ ! -f .deps/MANIFEST || ! -f .deps/flashinfer/MANIFEST || ! -f .deps/googletest/CMakeLists.txt ]]; then
  scripts/stage_deps.sh
fi

# 2. Configure (cheap when nothing changed). The toolkit's library folder goes into every binary's
# RUNPATH as the device names it (there lib64 is targets/x86_64-linux/lib; here the libraries may
# sit elsewhere), so libcudart and the cuBLAS the engine loads at run time are found there without
# the loader's configuration.
cuda_rpath="/usr/local/cuda/lib64;/usr/local/cuda/targets/x86_64-linux/lib"
nvcc=${CUDACXX:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
[[ -x $nvcc ]] || die "needs nvcc (CUDA 13), for sm_90a"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_COMPILER="$nvcc" -DCMAKE_CUDA_ARCHITECTURES=90a \
  -DBESTOFN_STAGED_DEPS="$root/.deps" -DBESTOFN_NATIVE=OFF -DBESTOFN_FUZZ=OFF \
  "-DCMAKE_EXE_LINKER_FLAGS=-static-libstdc++ -static-libgcc" "-DCMAKE_BUILD_RPATH=$cuda_rpath" \
  > /tmp/device_bundle_configure.log \
  || { tail -20 /tmp/device_bundle_configure.log; die "configure failed (/tmp/device_bundle_configure.log)"; }
grep -q "cascade-attention with FlashInfer's headers from" /tmp/device_bundle_configure.log \
  || die "configure found no FlashInfer headers: --cascade-attention would not be built"

# 3. The targets; every test binary of the labels the check runs (gpu, cuda-host) must be among them.
mapfile -t names < <(grep -v '^#' "$targets" | cut -f1)
for f in "$build"/tests/*_include.cmake; do
  grep -qE 'LABELS;(gpu|cuda-host);' "$f" || continue
  t=$(basename "$f" | sed 's/\[1\]_include.cmake$//')
  printf '%s\n' "${names[@]}" | grep -qx "$t" || die "$t (label gpu or cuda-host) is not in $targets"
done
t_build=$(date +%s)
cmake --build "$build" -j "$jobs" --target "${names[@]}"
build_s=$(($(date +%s) - t_build))

# ctest's discovery (DISCOVERY_MODE PRE_TEST) runs GoogleTestAddTests.cmake from this CMake's own
# folder; the device's CMake lives elsewhere: the bundle carries the script, and the test lists are
# discovered here (their files newer than the binaries, so ctest there does not rediscover).
probe=$(mktemp --suffix=.cmake)
# shellcheck disable=SC2016  # CMake's variable, for cmake -P
echo 'message("${CMAKE_ROOT}")' > "$probe"
cmake_root=$(cmake -P "$probe" 2>&1)
rm -f "$probe"
[[ -f $cmake_root/Modules/GoogleTestAddTests.cmake ]] || die "no GoogleTestAddTests.cmake under CMAKE_ROOT '$cmake_root'"
mkdir -p "$build/cmake-modules"
cp "$cmake_root/Modules/GoogleTestAddTests.cmake" "$build/cmake-modules/"
sed -i "s#include(\"$cmake_root/Modules/GoogleTestAddTests.cmake\")#include(\"$root/$build/cmake-modules/GoogleTestAddTests.cmake\")#" \
  "$build"/tests/*_include.cmake
listed=$(ctest --test-dir "$build" -N -L 'gpu|cuda-host' | sed -n 's/^Total Tests: //p')
((listed > 0)) || die "ctest lists no gpu or cuda-host test in $build"

# 4. What the binaries need.
mapfile -t paths < <(grep -v '^#' "$targets" | cut -f2)
bad=0
for p in "${paths[@]}"; do
  f=$build/$p
  [[ -x $f ]] || { echo "missing: $f"; bad=1; continue; }
  if ldd "$f" | grep -q 'not found'; then
    echo "$p: $(ldd "$f" | grep 'not found' | tr '\n' ' ')"
    bad=1
  fi
  while read -r lib; do
    case $lib in
      libc.so.6 | libm.so.6 | libdl.so.2 | librt.so.1 | libpthread.so.0 | ld-linux-x86-64.so.2) ;;  # glibc
      libcudart.so.13 | libcublasLt.so.13 | libcublas.so.13) ;;                                   # the CUDA toolkit
      libpcre2-8.so.0 | libz.so.1 | libcrypto.so.3)                                                # .deps/lib, by RUNPATH
        [[ -f .deps/lib/$lib ]] || { echo "$p: needs $lib, not in .deps/lib"; bad=1; } ;;
      *) echo "$p: needs $lib, which the device may lack"; bad=1 ;;
    esac
  done < <(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  newest=$(objdump -T "$f" | grep -o 'GLIBC_[0-9.]*' | sort -t. -k1,1 -k2,2n -u | sed 's/GLIBC_//' | sort -V | tail -1)
  if [[ -n $newest ]] && [[ $(printf '%s\n2.39\n' "$newest" | sort -V | tail -1) != 2.39 ]]; then
    echo "$p: needs glibc $newest, newer than the device's 2.39"
    bad=1
  fi
done
runpath=$(readelf -d "$build/bestofn" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')
[[ $runpath == *"$root/.deps/lib"* ]] || { echo "bestofn: RUNPATH '$runpath' lacks $root/.deps/lib"; bad=1; }
for p in "${paths[@]}"; do
  if readelf -d "$build/$p" | grep -q 'NEEDED.*libcudart' && ! readelf -d "$build/$p" | grep -q 'RUNPATH.*/usr/local/cuda/lib64'; then
    echo "$p: needs libcudart but its RUNPATH lacks /usr/local/cuda/lib64"
    bad=1
  fi
done
((bad == 0)) || die "a binary needs something the device lacks (above)"
echo "device_bundle.sh: ${#paths[@]} binaries; they need glibc (<= 2.39), the CUDA 13 toolkit's libcudart / libcublasLt and .deps/lib (RUNPATH $runpath)"

# 5. The bundle: the binaries, ctest's files, the discovery script, BUNDLE.
commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
if [[ $commit != unknown ]] && ! git diff --quiet HEAD -- 2>/dev/null; then commit+=-dirty; fi
{
  echo "made $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname) by benchmarks/device_bundle.sh"
  echo "commit $commit"
  echo "sources $(dc_source_digest "$root")"
  echo "cmake -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a -DBESTOFN_STAGED_DEPS=$root/.deps" \
    "-DBESTOFN_NATIVE=OFF -DBESTOFN_FUZZ=OFF -DCMAKE_EXE_LINKER_FLAGS='-static-libstdc++ -static-libgcc'" \
    "-DCMAKE_BUILD_RPATH='$cuda_rpath'"
  echo "nvcc $("$nvcc" --version | tail -1)"
  echo "c++ $(c++ --version | head -1)"
} > "$build/BUNDLE"
mapfile -t ctest_files < <(cd "$build" && find . -name CTestTestfile.cmake -o -path './tests/*_include.cmake' -o -path './tests/*_tests.cmake' | sort)
t_pack=$(date +%s)
tmp=$bundle.tmp
tar -C "$build" -cf - BUNDLE cmake-modules "${ctest_files[@]}" "${paths[@]}" | xz -9 -T1 > "$tmp"
mv "$tmp" "$bundle"
pack_s=$(($(date +%s) - t_pack))

raw=$(cd "$build" && du -cb "${paths[@]}" | tail -1 | cut -f1)
packed=$(stat -c %s "$bundle")
deps=$(du -sb .deps | cut -f1)
tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 du -cb 2>/dev/null | awk '/total$/ {s += $1} END {print s + 0}')
echo "device_bundle.sh: $bundle $((packed / 1048576)) MiB ($((raw / 1048576)) MiB of binaries), commit $commit"
echo "  build ${build_s}s, pack ${pack_s}s, all $(($(date +%s) - t_start))s; carried: tree $((tree / 1048576)) MiB + .deps $((deps / 1048576)) MiB"
if ((tree + deps > 64 * 1048576)); then
  die "the tree and .deps make $(((tree + deps) / 1048576)) MiB, over the 64 MiB a device run carries"
fi
