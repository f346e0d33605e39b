# libFuzzer targets (fuzz/): built by the sanitizer build (clang++, -DBESTOFN_SANITIZE=ON, which
# scripts/setup.sh makes in build-asan/), whose parsers are instrumented for them; run by the main
# build's ctest, like the sanitizer build's unit tests (cmake/Sanitize.cmake). Each target gets two
# tests, labelled "fuzz": a corpus seeded from real files (scripts/fuzz_corpus.sh), then a bounded
# run (BESTOFN_FUZZ_SECONDS, default 7: CI's 30 minutes) that also replays the committed crashers in
# tests/data/fuzz_regressions/<target>/ first. A crash, a sanitizer report, a leak, an input that
# runs longer than 25 s or an RSS above 2 GB fails the test; the input is left in
# <build>/fuzz/artifacts/.
option(BESTOFN_FUZZ "Build the libFuzzer targets in a sanitizer build made by clang++ (needs libclang-rt-14-dev)" ON)
set(BESTOFN_FUZZ_SECONDS 7 CACHE STRING "Seconds each fuzz test runs its target")
set(BESTOFN_FUZZ_TARGETS safetensors safetensors_index model_config tokenizer_json tokenizer datasets samples_jsonl
    stop_strings utf8)
# What the targets cover, instrumented for libFuzzer's coverage in the sanitizer build.
set(BESTOFN_FUZZ_PARSERS src/util/dtype.cpp src/model/safetensors.cpp src/util/json_file.cpp src/model/model_config.cpp
    src/util/utf8.cpp src/tokenizer/bpe.cpp src/tokenizer/tokenizer.cpp src/tokenizer/tokenizer_json.cpp
    src/tokenizer/pre_tokenizer.cpp src/tokenizer/nfc.cpp src/util/text_file.cpp src/eval/datasets.cpp
    src/eval/dataset_manifest.cpp src/generate/stop_strings.cpp)

# The sanitizer build: build the targets (it records whether it did, for the main build to read).
if(BESTOFN_SANITIZE)
  set(_built OFF)
  if(BESTOFN_FUZZ AND CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    set_property(SOURCE ${BESTOFN_FUZZ_PARSERS} APPEND PROPERTY COMPILE_OPTIONS -fsanitize=fuzzer-no-link)
    add_subdirectory(fuzz)
    set(_built ON)
    message(STATUS "bestofn: libFuzzer targets ON (${CMAKE_CXX_COMPILER})")
  else()
    message(STATUS "bestofn: no libFuzzer targets (BESTOFN_FUZZ=${BESTOFN_FUZZ}, compiler ${CMAKE_CXX_COMPILER_ID}: they need clang++)")
  endif()
  set(BESTOFN_FUZZ_BUILT ${_built} CACHE INTERNAL "This sanitizer build builds the libFuzzer targets in fuzz/")
  return()
endif()

if(NOT BESTOFN_BUILD_TESTS OR NOT BESTOFN_ASAN_BUILD)
  return()
endif()
file(STRINGS ${BESTOFN_ASAN_BUILD}/CMakeCache.txt _fuzz_built REGEX "^BESTOFN_FUZZ_BUILT:INTERNAL=")
if(NOT _fuzz_built MATCHES "=ON$")
  message(STATUS "bestofn: no fuzz tests: ${BESTOFN_ASAN_BUILD} builds no libFuzzer targets")
  return()
endif()
set(_shared "$ENV{BESTOFN_SHARED}")
if(NOT _shared)
  set(_shared "${CMAKE_SOURCE_DIR}/../shared")
endif()
# The corpora are seeded from ../shared: a checkout without it registers no fuzz test and says so
# (tests/test_util.cpp does the same for the unit tests), unless the data is required (.ci/run).
if(NOT EXISTS ${_shared}/tokenizers AND NOT "$ENV{BESTOFN_REQUIRE_TEST_DATA}" STREQUAL "1")
  message(STATUS "bestofn: the fuzz tests are skipped: ${_shared} is missing (their corpora are seeded from it)")
  return()
endif()
set(_fuzz_bin ${CMAKE_BINARY_DIR}/fuzz)
file(MAKE_DIRECTORY ${_fuzz_bin}/artifacts)
foreach(_t IN LISTS BESTOFN_FUZZ_TARGETS)
  set(_corpus ${_fuzz_bin}/corpus/${_t})
  add_test(NAME fuzz_${_t}_corpus
    COMMAND ${CMAKE_SOURCE_DIR}/scripts/fuzz_corpus.sh ${_t} ${_corpus} $<TARGET_FILE:bestofn>)
  set_tests_properties(fuzz_${_t}_corpus PROPERTIES FIXTURES_SETUP fuzz_corpus_${_t} LABELS fuzz)
  set(_dirs ${_corpus})
  if(EXISTS ${CMAKE_SOURCE_DIR}/tests/data/fuzz_regressions/${_t})
    list(APPEND _dirs ${CMAKE_SOURCE_DIR}/tests/data/fuzz_regressions/${_t})
  endif()
  add_test(NAME fuzz_${_t}
    COMMAND ${BESTOFN_ASAN_BUILD}/fuzz/fuzz_${_t} -max_total_time=${BESTOFN_FUZZ_SECONDS} -timeout=25 -rss_limit_mb=2048
            -max_len=16384 -print_final_stats=1 -artifact_prefix=${_fuzz_bin}/artifacts/${_t}- ${_dirs}
    WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(fuzz_${_t} PROPERTIES FIXTURES_REQUIRED fuzz_corpus_${_t} LABELS fuzz
    ENVIRONMENT "BESTOFN_SHARED=${_shared};BESTOFN_FUZZ_MODEL=${_fuzz_bin}/corpus/safetensors_index-model;UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1"
    TIMEOUT 600 COST ${BESTOFN_FUZZ_SECONDS})
endforeach()
message(STATUS "bestofn: fuzz tests of ${BESTOFN_ASAN_BUILD}/fuzz, ${BESTOFN_FUZZ_SECONDS} s per target")
