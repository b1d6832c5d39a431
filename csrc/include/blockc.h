/* blockc: transformer-block kernels in C.
 *
 * The public API is the part headers below. build_ffi.py reads this list and
 * derives the cffi cdef from those headers, so keep each declaration on the
 * plain-C subset cffi parses (no macros in signatures; integer #defines are fine).
 *
 * Conventions for every entry point:
 *   - returns an int status: BC_OK (0) or a BC_E* code; it never aborts and never prints;
 *   - outputs first, then inputs, then sizes (size_t);
 *   - optional parts are NULL;
 *   - on any error nothing is written to the outputs.
 */
#ifndef BLOCKC_H
#define BLOCKC_H

#include "bc_core.h"
#include "bc_runtime.h"
#include "bc_engine.h"
#include "bc_book.h"
#include "bc_gpt.h"

#endif
