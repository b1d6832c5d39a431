/* bc_atomic.h: the runtime's int settings (-1: not read yet), read and set
 * from any thread, and its thread-local storage (internal; isa.c, runtime.c). */
#ifndef BC_ATOMIC_H
#define BC_ATOMIC_H

/* Atomic int accesses: GCC/clang builtins; elsewhere (MSVC) aligned int
 * accesses are atomic already, and the only race (two threads reading the
 * environment at once) stores the same value twice. */
#if defined(__GNUC__) || defined(__clang__)
#define BC_LOAD(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define BC_STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define BC_INIT_ONCE(p, v)                                                               \
    do {                                                                                 \
        int unset_ = -1;                                                                 \
        __atomic_compare_exchange_n((p), &unset_, (v), 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE); \
    } while (0)
#define BC_TLS _Thread_local
#else
#define BC_LOAD(p) (*(volatile int *)(p))
#define BC_STORE(p, v) (*(volatile int *)(p) = (v))
#define BC_INIT_ONCE(p, v)          \
    do {                            \
        if (BC_LOAD(p) < 0)         \
            BC_STORE((p), (v));     \
    } while (0)
#define BC_TLS __declspec(thread)
#endif

#endif
