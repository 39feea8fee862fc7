/* BLAKE3's avx512 code, compiled for that instruction set whatever the build's flags (one set of
 * flags serves the whole extension); blake3_dispatch.c calls it only where the CPU has it. */
#if defined(__x86_64__) || defined(__i386__)
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512vl"))), apply_to = function)
#elif defined(__GNUC__)
#pragma GCC target("avx512f,avx512vl")
#endif
#include "blake3_avx512.c"
#if defined(__clang__)
#pragma clang attribute pop
#endif
#endif
