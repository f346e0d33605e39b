#pragma once
// Helpers shared by the libFuzzer targets.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

namespace bestofn::fuzz {

// A broken invariant: print what and abort, which libFuzzer reports as a crash with the input.
[[noreturn]] inline void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz invariant broken: %s\n", what.c_str());
  std::abort();
}

inline void check(bool ok, const std::string& what) {
  if (!ok) fail(what);
}

inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// A private directory for the process (removed at exit), for targets whose entry point reads files.
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    std::string tmpl = (std::filesystem::temp_directory_path() / "bestofn-fuzz-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) fail("mkdtemp failed");
    static const std::filesystem::path keep = tmpl;
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(keep, ec);
    });
    return keep;
  }();
  return dir;
}

inline std::filesystem::path write_scratch(const std::string& name, std::string_view bytes) {
  const auto p = scratch_dir() / name;
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out.flush()) fail("cannot write " + p.string());
  return p;
}

// ../shared beside the checkout (the tests' working directory is the repository root), or
// $BESTOFN_SHARED.
inline std::filesystem::path shared_path(const std::string& rel) {
  const char* env = std::getenv("BESTOFN_SHARED");
  return std::filesystem::path(env && *env ? env : "../shared") / rel;
}

}  // namespace bestofn::fuzz
