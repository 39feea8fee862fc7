/* BLAKE3's NEON code, where blake3_impl.h enables it (AArch64). */
#include "blake3_impl.h"
#if BLAKE3_USE_NEON == 1
#include "blake3_neon.c"
#endif
