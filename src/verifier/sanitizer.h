#pragma once
// BESTOFN_ASAN is 1 in an AddressSanitizer build, whichever compiler made it: GCC defines
// __SANITIZE_ADDRESS__, clang answers __has_feature(address_sanitizer) (clang 14 defines no macro).
#if defined(__SANITIZE_ADDRESS__)
#define BESTOFN_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define BESTOFN_ASAN 1
#endif
#endif
#ifndef BESTOFN_ASAN
#define BESTOFN_ASAN 0
#endif
