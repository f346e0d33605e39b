# libFuzzer targets (fuzz/): a separate CMake project built with clang++ (whatever compiler builds
# the rest) through ExternalProject, when clang++ is present and BESTOFN_FUZZ is on. Each target
# gets two tests, labelled "fuzz": a corpus seeded from real files (scripts/fuzz_corpus.sh), then a
# bounded run (BESTOFN_FUZZ_SECONDS, default 10) that also replays the committed crashers in
# tests/data/fuzz_regressions/<target>/ first. A crash, a sanitizer report, a leak, an input that
# runs longer than 25 s or an RSS above 2 GB fails the test; the input is left in
# <build>/fuzz/artifacts/.
option(BESTOFN_FUZZ "Build the libFuzzer targets (needs clang++ and libclang-rt-14-dev)" ON)
set(BESTOFN_FUZZ_SECONDS 10 CACHE STRING "Seconds each fuzz test runs its target")
set(BESTOFN_FUZZ_TARGETS safetensors safetensors_index model_config tokenizer_json tokenizer datasets samples_jsonl
    stop_strings utf8)
find_program(BESTOFN_CLANGXX NAMES clang++ clang++-14)
if(NOT BESTOFN_FUZZ OR NOT BESTOFN_CLANGXX)
  message(STATUS "bestofn: no libFuzzer targets (BESTOFN_FUZZ=${BESTOFN_FUZZ}, clang++: ${BESTOFN_CLANGXX})")
  return()
endif()

include(ExternalProject)
set(_fuzz_bin ${CMAKE_BINARY_DIR}/fuzz)
ExternalProject_Add(bestofn_fuzz
  SOURCE_DIR ${CMAKE_SOURCE_DIR}/fuzz
  BINARY_DIR ${_fuzz_bin}
  PREFIX ${CMAKE_BINARY_DIR}/fuzz-prefix
  CMAKE_ARGS -DCMAKE_CXX_COMPILER=${BESTOFN_CLANGXX} -DCMAKE_BUILD_TYPE=Release
             -DBESTOFN_STAGED_DEPS=${BESTOFN_STAGED_DEPS}
  BUILD_ALWAYS ON
  INSTALL_COMMAND "")
message(STATUS "bestofn: libFuzzer targets ON (${BESTOFN_CLANGXX}), ${BESTOFN_FUZZ_SECONDS} s per target")

if(NOT BESTOFN_BUILD_TESTS)
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
    COMMAND ${_fuzz_bin}/fuzz_${_t} -max_total_time=${BESTOFN_FUZZ_SECONDS} -timeout=25 -rss_limit_mb=2048
            -max_len=16384 -print_final_stats=1 -artifact_prefix=${_fuzz_bin}/artifacts/${_t}- ${_dirs}
    WORKING_DIRECTORY ${CMAKE_SOURCE_DIR})
  set_tests_properties(fuzz_${_t} PROPERTIES FIXTURES_REQUIRED fuzz_corpus_${_t} LABELS fuzz
    ENVIRONMENT "BESTOFN_SHARED=${_shared};BESTOFN_FUZZ_MODEL=${_fuzz_bin}/corpus/safetensors_index-model"
    TIMEOUT 600 COST ${BESTOFN_FUZZ_SECONDS})
endforeach()
