/* status.c: the description of every status code. */
#include "bc_core.h"

const char *bc_strerror(int status)
{
    switch (status) {
    case BC_OK: return "ok";
    case BC_ENULL: return "a required pointer is NULL";
    case BC_ESIZE: return "a size is zero or inconsistent";
    case BC_EOVERFLOW: return "a size is too large";
    case BC_EHEADS: return "d_model is not divisible by n_heads";
    case BC_EOPTION: return "unknown option";
    case BC_ENOMEM: return "out of memory";
    case BC_ERANGE: return "index out of range";
    case BC_ECONTEXT: return "sequence longer than the context";
    case BC_EWORKSPACE: return "workspace too small";
    case BC_EALIAS: return "an output overlaps an input";
    case BC_EVALUE: return "a value cannot be represented";
    case BC_EEVICTED: return "the ring cache no longer holds a position this needs";
    default: return "unknown status";
    }
}
