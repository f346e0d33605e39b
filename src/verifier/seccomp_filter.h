#pragma once
// The candidate's one seccomp filter, installed by child_main (sandbox.cpp) on each fresh-path
// candidate and on each zygote, whose forks inherit it. It is not a syscall jail; it closes what
// the namespaces and the minimal root leave open:
//  - the kernel keyrings (add_key, request_key, keyctl: EPERM), whose user keyring belongs to the
//    uid, machine-wide, and so would carry data from one candidate to the next;
//  - unix sockets other than socket pairs (socket(AF_UNIX, ...): EPERM). The minimal root holds no
//    host socket file, so there is nothing to connect() to; this is the second wall, should a
//    socket path ever become reachable (a host's /run/docker.sock, D-Bus, a database). socketpair()
//    stays allowed: Python's multiprocessing pipes and asyncio's wake-up use it. (A socket pair's
//    datagram end can still name a path in sendmsg(); seccomp cannot read that address: the first
//    wall alone covers it.)
//  - io_uring (ENOSYS): its operations create sockets and connect them without the system calls
//    this filter sees;
//  - every other system call ABI (i386 int 0x80, x32: ENOSYS), whose numbers the filter would
//    otherwise have to know as well.
// No allocation: callable in a clone()d child. Needs no_new_privs (or CAP_SYS_ADMIN) first.
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/socket.h>
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
  // Each refused call is "equal? then the next instruction returns, else skip it": no long jumps.
#define BESTOFN_REFUSE(nr, err) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1), BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (err))
  static const sock_filter code[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kArch, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),  // another ABI
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
#if defined(__x86_64__)
      BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000 /* __X32_SYSCALL_BIT */, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),  // x32
#endif
      BESTOFN_REFUSE(__NR_add_key, EPERM),
      BESTOFN_REFUSE(__NR_request_key, EPERM),
      BESTOFN_REFUSE(__NR_keyctl, EPERM),
      BESTOFN_REFUSE(__NR_io_uring_setup, ENOSYS),
      BESTOFN_REFUSE(__NR_io_uring_enter, ENOSYS),
      BESTOFN_REFUSE(__NR_io_uring_register, ENOSYS),
      // socket(domain, ...): the kernel reads the domain as an int, the argument's low 32 bits
      // (the first word of args[0] on these little-endian ABIs).
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_socket, 0, 3),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args)),
      BESTOFN_REFUSE(AF_UNIX, EPERM),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
#undef BESTOFN_REFUSE
  const sock_fprog prog{static_cast<unsigned short>(sizeof code / sizeof code[0]), const_cast<sock_filter*>(code)};
  return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) == 0 ? 0 : errno;
#else
  return ENOTSUP;
#endif
}

}  // namespace bestofn::sandbox_filter
