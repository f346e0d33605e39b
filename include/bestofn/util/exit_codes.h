#pragma once
// The exit codes of bestofn's commands (README "Exit codes"), which the commands' run_ functions
// in their layers return and the CLI passes on.
namespace bestofn {

inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;  // bad input or a failure
inline constexpr int kExitUsage = 2;
inline constexpr int kExitBelowThreshold = 3;  // eval --fail-under; compare --fail-if-worse
inline constexpr int kExitInterrupted = 130;  // eval stopped by SIGINT or SIGTERM (--resume finishes it)

}  // namespace bestofn
