#pragma once
// The path of the sandbox's own procfs inside its root (sandbox_root.h says why it is hidden from
// candidates), and the zygote's other root-only directories there, as macros: the zygote helper (zygote_helper.cpp), which links no C++ runtime,
// builds its /proc paths from it by string-literal concatenation.
#define BESTOFN_PRIVATE_PROC "/proc/.bestofn"

// Root-only directories beside it where the zygote renews a worker's /tmp and /dev/shm: a fresh
// tmpfs is mounted at the spare one, the old mount moved to the old one, the fresh one moved into
// place (zygote_helper.cpp's fresh_tmpfs).
#define BESTOFN_SPARE_TMP "/proc/.bestofn-tmp"
#define BESTOFN_OLD_TMP "/proc/.bestofn-tmp-old"
#define BESTOFN_SPARE_SHM "/proc/.bestofn-shm"
#define BESTOFN_OLD_SHM "/proc/.bestofn-shm-old"
