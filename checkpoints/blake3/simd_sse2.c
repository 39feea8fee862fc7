/* BLAKE3's sse2 code, compiled for that instruction set whatever the build's flags (one set of
 * flags serves the whole extension); blake3_dispatch.c calls it only where the CPU has it. */
#if defined(__x86_64__) || defined(__i386__)
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("sse2"))), apply_to = function)
#elif defined(__GNUC__)
#pragma GCC target("sse2")
#endif
#include "blake3_sse2.c"
#if defined(__clang__)
#pragma clang attribute pop
#endif
#endif
