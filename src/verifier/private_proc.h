#pragma once
// The path of the sandbox's own procfs inside its root (sandbox_root.h says why it is hidden from
// candidates), as a macro: the zygote helper (zygote_helper.cpp), which links no C++ runtime,
// builds its /proc paths from it by string-literal concatenation.
#define BESTOFN_PRIVATE_PROC "/proc/.bestofn"
