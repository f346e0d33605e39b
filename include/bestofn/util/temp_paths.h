#pragma once
// Paths that must not outlive the process when a signal ends it: an output's partial file, a
// model's staging directory. On SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGXCPU, SIGXFSZ,
// SIGALRM, SIGUSR1 or SIGUSR2 the handler (installed once, by
// install_temp_path_cleanup) unlinks each registered file, or removes each registered directory
// with the files directly in it, then lets the signal kill the process as it would have. Without a
// signal the owners remove (or rename) their paths themselves and unregister them.
#include <string>

namespace bestofn {

// A handle for unregister_temp_path; -1 when the table (32 paths) is full or the path too long
// (then only the owner's own cleanup applies).
int register_temp_path(const std::string& path);
void unregister_temp_path(int handle);

// Installs the handler for those signals (not for a signal the parent set to ignore). Safe to
// call again. Children that run code before they exec must first put the handlers back to their
// defaults (the sandbox's clone_trampoline does).
void install_temp_path_cleanup();

// The handler's work, callable by another handler that replaces it for a while (eval's): async-
// signal-safe.
void remove_temp_paths_now() noexcept;

}  // namespace bestofn
