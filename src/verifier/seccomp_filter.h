#pragma once
// The candidate's one seccomp filter, installed by child_main (sandbox.cpp) on each fresh-path
// candidate and on each zygote, whose forks inherit it. It is not a syscall jail: it closes the kernel keyrings
// (add_key, request_key, keyctl: EPERM), whose user keyring belongs to the uid, machine-wide, and
// so would carry data from one candidate to the next, across bestofn runs and to the host's own
// users of that uid; and every other system call ABI (i386 int 0x80, x32: ENOSYS), whose
// numbers the filter would otherwise have to know as well. No allocation: callable in a clone()d
// child. Needs no_new_privs (or CAP_SYS_ADMIN) first.
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include <cerrno>
#include <cstddef>

namespace bestofn::sandbox_filter {

#if defined(__x86_64__)
inline constexpr unsigned kArch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
inline constexpr unsigned kArch = AUDIT_ARCH_AARCH64;
#endif

// 0, or the errno of the failed install (ENOTSUP on an architecture this filter does not know).
inline int install() {
#if defined(__x86_64__) || defined(__aarch64__)
  static const sock_filter code[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kArch, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),  // another ABI
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
#if defined(__x86_64__)
      BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000 /* __X32_SYSCALL_BIT */, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),  // x32
#endif
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_add_key, 3, 0),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_request_key, 2, 0),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_keyctl, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
  };
  const sock_fprog prog{static_cast<unsigned short>(sizeof code / sizeof code[0]), const_cast<sock_filter*>(code)};
  return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) == 0 ? 0 : errno;
#else
  return ENOTSUP;
#endif
}

}  // namespace bestofn::sandbox_filter
