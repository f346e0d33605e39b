# Every dependency comes from Debian's packages through find_package; nothing is downloaded.
#   libcli11-dev nlohmann-json3-dev libspdlog-dev libgtest-dev libssl-dev  (scripts/setup.sh installs them)
# On a machine without those packages (the GPU box), scripts/stage_deps.sh copies them into .deps/
# and -DBESTOFN_STAGED_DEPS=$PWD/.deps builds against that copy: the same targets, header-only,
# GoogleTest built from its staged sources.
set(THREADS_PREFER_PTHREAD_FLAG ON)
find_package(Threads REQUIRED)
set(BESTOFN_STAGED_DEPS "" CACHE PATH "Folder made by scripts/stage_deps.sh (empty: find_package)")

if(NOT BESTOFN_STAGED_DEPS)
  # PCRE2 (libpcre2-dev): the Unicode-aware regex of the Llama 3 pre-tokenizer.
  find_package(PkgConfig REQUIRED)
  pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
  find_package(ZLIB REQUIRED)  # zlib1g-dev: gzip datasets
  find_package(OpenSSL 3.0 REQUIRED COMPONENTS Crypto)  # libssl-dev: libcrypto's SHA-256 of the datasets
  find_package(nlohmann_json 3.10 REQUIRED)
  find_package(CLI11 2.0 REQUIRED)
  find_package(spdlog 1.9 REQUIRED)
  if(BESTOFN_BUILD_TESTS)
    find_package(GTest REQUIRED)
  endif()
  return()
endif()

set(_staged "${BESTOFN_STAGED_DEPS}")
foreach(_file include/nlohmann/json.hpp include/CLI/CLI.hpp include/spdlog/spdlog.h include/fmt/format.h include/openssl/evp.h
              googletest/CMakeLists.txt)
  if(NOT EXISTS "${_staged}/${_file}")
    message(FATAL_ERROR "BESTOFN_STAGED_DEPS=${_staged} lacks ${_file}: run scripts/stage_deps.sh")
  endif()
endforeach()
message(STATUS "bestofn: dependencies from the staged folder ${_staged}")

# The three compiled libraries, staged as headers + shared object.
add_library(PkgConfig::PCRE2 SHARED IMPORTED)
set_target_properties(PkgConfig::PCRE2 PROPERTIES IMPORTED_LOCATION "${_staged}/lib/libpcre2-8.so"
  IMPORTED_NO_SONAME TRUE INTERFACE_INCLUDE_DIRECTORIES "${_staged}/include")
add_library(ZLIB::ZLIB SHARED IMPORTED)
set_target_properties(ZLIB::ZLIB PROPERTIES IMPORTED_LOCATION "${_staged}/lib/libz.so"
  IMPORTED_NO_SONAME TRUE INTERFACE_INCLUDE_DIRECTORIES "${_staged}/include")
add_library(OpenSSL::Crypto SHARED IMPORTED)
set_target_properties(OpenSSL::Crypto PROPERTIES IMPORTED_LOCATION "${_staged}/lib/libcrypto.so"
  IMPORTED_NO_SONAME TRUE INTERFACE_INCLUDE_DIRECTORIES "${_staged}/include")

# Imported targets: their include directories are SYSTEM, so the project's -Werror skips them.
foreach(_target nlohmann_json::nlohmann_json CLI11::CLI11 spdlog::spdlog)
  add_library(${_target} INTERFACE IMPORTED)
  set_target_properties(${_target} PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${_staged}/include")
endforeach()
# Debian builds spdlog against the external fmt and ships both as libraries; here both are used
# header-only (spdlog then includes its -inl.h files, fmt its format-inl.h). nvcc 13 rejects fmt 9's
# consteval format strings in C++20, with or without staging: keep spdlog out of .cu files.
set_target_properties(spdlog::spdlog PROPERTIES
  INTERFACE_COMPILE_DEFINITIONS "SPDLOG_HEADER_ONLY;SPDLOG_FMT_EXTERNAL;FMT_HEADER_ONLY"
  INTERFACE_LINK_LIBRARIES Threads::Threads)

if(BESTOFN_BUILD_TESTS)
  # GoogleTest from source, without gmock or install rules; its targets get none of the project's
  # warning flags (bestofn_warnings is per target). It defines the GTest::gtest(_main) aliases.
  set(BUILD_GMOCK OFF)
  set(INSTALL_GTEST OFF)
  add_subdirectory("${_staged}/googletest" "${CMAKE_BINARY_DIR}/_deps/googletest" EXCLUDE_FROM_ALL SYSTEM)
  if(NOT TARGET GTest::gtest OR NOT TARGET GTest::gtest_main)
    message(FATAL_ERROR "${_staged}/googletest did not define GTest::gtest and GTest::gtest_main")
  endif()
endif()
