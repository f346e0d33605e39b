#pragma once
// CPU features that the compilers' __builtin_cpu_supports does not name everywhere.
#include <cpuid.h>

namespace bestofn::cpu {

// F16C (vcvtph2ps), from CPUID leaf 1 (clang 14's __builtin_cpu_supports does not know "f16c").
inline bool has_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
}

}  // namespace bestofn::cpu
