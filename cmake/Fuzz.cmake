# libFuzzer targets, built when clang++ is present (whatever compiler builds the rest): compiled
# directly with clang++ -fsanitize=fuzzer,address,undefined from the parser sources they cover.
find_program(BESTOFN_CLANGXX NAMES clang++ clang++-14)
if(BESTOFN_CLANGXX)
  get_target_property(_json_inc nlohmann_json::nlohmann_json INTERFACE_INCLUDE_DIRECTORIES)
  set(_fuzz_flags -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
      -I${CMAKE_SOURCE_DIR}/include)
  foreach(_inc IN LISTS _json_inc)
    # /usr/include is already searched; naming it again breaks libstdc++'s #include_next.
    if(NOT _inc STREQUAL "/usr/include")
      list(APPEND _fuzz_flags -isystem ${_inc})
    endif()
  endforeach()
  set(_fuzz_safetensors_src ${CMAKE_SOURCE_DIR}/fuzz/fuzz_safetensors.cpp ${CMAKE_SOURCE_DIR}/src/safetensors.cpp
      ${CMAKE_SOURCE_DIR}/src/dtype.cpp)
  add_custom_command(
    OUTPUT ${CMAKE_BINARY_DIR}/fuzz/fuzz_safetensors
    COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/fuzz
    COMMAND ${BESTOFN_CLANGXX} ${_fuzz_flags} ${_fuzz_safetensors_src} -o ${CMAKE_BINARY_DIR}/fuzz/fuzz_safetensors
    DEPENDS ${_fuzz_safetensors_src} ${CMAKE_SOURCE_DIR}/include/bestofn/safetensors.h
    COMMENT "libFuzzer target fuzz_safetensors (clang++)"
    VERBATIM)
  add_custom_target(fuzz_safetensors ALL DEPENDS ${CMAKE_BINARY_DIR}/fuzz/fuzz_safetensors)
  if(BESTOFN_BUILD_TESTS)
    # A bounded run on a corpus seeded from real and synthetic files, as a regular test.
    add_test(NAME fuzz_safetensors_corpus
      COMMAND ${CMAKE_SOURCE_DIR}/scripts/fuzz_corpus.sh ${CMAKE_BINARY_DIR}/fuzz/corpus_safetensors $<TARGET_FILE:bestofn>)
    set_tests_properties(fuzz_safetensors_corpus PROPERTIES FIXTURES_SETUP fuzz_corpus LABELS "unit;fuzz")
    add_test(NAME fuzz_safetensors_smoke
      COMMAND ${CMAKE_BINARY_DIR}/fuzz/fuzz_safetensors -max_total_time=20 -rss_limit_mb=2048 -max_len=4096
              ${CMAKE_BINARY_DIR}/fuzz/corpus_safetensors)
    set_tests_properties(fuzz_safetensors_smoke PROPERTIES FIXTURES_REQUIRED fuzz_corpus LABELS "unit;fuzz")
  endif()
  message(STATUS "bestofn: libFuzzer targets ON (${BESTOFN_CLANGXX})")
else()
  message(STATUS "bestofn: clang++ not found, no libFuzzer targets")
endif()
