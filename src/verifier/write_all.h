#pragma once
// write() until all n bytes are out, retrying short writes and EINTR; false on an error. No
// allocation and no sanitizer instrumentation: sandbox.cpp calls it in clone()d children (see
// BESTOFN_CHILD_CODE there), and the zygote helper (zygote_helper.cpp), which runs inside python3,
// uses it too.
#include <unistd.h>

#include <cerrno>
#include <cstddef>

#include "sanitizer.h"

namespace bestofn::sandbox_io {

// The first message on the verifier's channel (the candidate's fd 3), written by the sandbox's
// setup in the process that will run the program, before any of the program runs: the kernel
// attaches this process's pid (SCM_CREDENTIALS), and the token then counts only from that pid.
inline constexpr char kSetupHello[] = "setup\n";
inline constexpr std::size_t kSetupHelloBytes = sizeof kSetupHello - 1;

#if BESTOFN_ASAN
__attribute__((no_sanitize("address")))
#endif
inline bool write_all(int fd, const void* data, std::size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

}  // namespace bestofn::sandbox_io
