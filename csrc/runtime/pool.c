/* pool.c: the kernels' threads, a persistent pool (internal).
 *
 * bc_rt_run hands the units of one job to the calling thread and to up to
 * threads-1 helpers. Units are claimed one at a time from a counter, in
 * increasing order, by whichever thread is free; the caller returns as soon
 * as every unit is done. It never waits for a thread: a helper that is
 * descheduled between units (a busy neighbour on the machine) simply takes
 * no part, and a helper that has not woken up yet finds the job finished.
 * There is no fork/join and no team barrier; a job costs one published
 * word and a counter, so a decode step can run dozens of them.
 *
 * Publication is a sequence lock: seq is odd while the caller writes the
 * job's fields and even once they are complete; a helper copies the fields
 * and uses the copy only if seq did not move meanwhile. Each job's unit
 * counter carries the job's number in its high 32 bits, so a helper that
 * wakes up late can never claim a unit of a later job with an earlier job's
 * function. Helpers spin about a millisecond after their last unit (decode
 * steps are microseconds apart), then sleep on a condition variable.
 *
 * Only one caller owns the pool at a time: a second thread calling while a
 * job runs (two Python threads, or a kernel called from inside a unit) runs
 * its job alone on its own thread. The bits are the same either way.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "bc_rt.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define BC_PAUSE() _mm_pause()
#else
#define BC_PAUSE() ((void)0)
#endif

#if defined(__GNUC__) || defined(__clang__)
#define LOAD(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)
#define LOAD_SC(p) __atomic_load_n((p), __ATOMIC_SEQ_CST)
#define STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELEASE)
#define STORE_SC(p, v) __atomic_store_n((p), (v), __ATOMIC_SEQ_CST)
#define ADD(p, v) __atomic_add_fetch((p), (v), __ATOMIC_ACQ_REL)
#define CAS(p, old, v) \
    __atomic_compare_exchange_n((p), (old), (v), 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)
#define HAVE_ATOMICS 1
#endif

#if !defined(_WIN32) && !defined(BC_NO_THREADS) && defined(HAVE_ATOMICS)
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#define HAVE_POOL 1
#endif

/* Run the units of a job on the calling thread alone. */
static void run_serial(size_t units, bc_unit_fn fn, const void *arg)
{
    for (size_t u = 0; u < units; u++)
        fn(arg, u, 0);
}

#ifndef HAVE_POOL

int bc_rt_pool_threads(int want) { (void)want; return 1; }

void bc_rt_run(int threads, size_t units, bc_unit_fn fn, const void *arg)
{
    (void)threads;
    run_serial(units, fn, arg);
}

void bc_rt_pool_forked(void) {}

#else

#define MAX_HELPERS 4095
#define SPIN_NS 300000L    /* a helper spins this long after its last job, then sleeps */

static struct {
    pthread_mutex_t mu;          /* guards helper creation and sleeping */
    pthread_cond_t cv;
    int helpers;                 /* helpers started (indices 1..helpers) */
    int busy;                    /* 1 while a caller owns the pool */
    int forked;                  /* 1 in a forked child: no helpers exist there */
    int sleepers;                /* helpers asleep on cv */
    uint64_t seq;                /* odd while a job is being published */
    /* the published job (written by the owner between the two seq increments) */
    uintptr_t fn;                /* bc_unit_fn */
    uintptr_t arg;
    uint64_t units;
    int threads;                 /* helpers 1..threads-1 take part */
    uint64_t next;               /* (job number << 32) | next unclaimed unit */
    uint64_t done;               /* units finished */
    long long serial_until;      /* jobs run on the caller alone until then (judge) */
} P = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Claim and run units of job number id (fields fn, arg, units) until none is
 * left; the number run. */
static uint64_t work(uint32_t id, bc_unit_fn fn, const void *arg, uint64_t units, int t)
{
    uint64_t w = LOAD(&P.next), ran = 0;
    for (;;) {
        if ((uint32_t)(w >> 32) != id || (w & 0xffffffffu) >= units)
            return ran;
        if (CAS(&P.next, &w, w + 1)) {
            fn(arg, (size_t)(w & 0xffffffffu), t);
            ADD(&P.done, 1);
            ran++;
            w = LOAD(&P.next);
        }
    }
}

/* Whether the helpers pull their weight. Over each window of WINDOW_NS of
 * jobs the owner compares the units helpers ran with their fair share; when
 * they ran less than half of it in two windows in a row (the machine is busy:
 * helpers keep being descheduled, and the ones that run take the caller's own
 * core; on a quiet machine they run 80-100% of it), jobs run on the calling
 * thread alone for a while, the helpers asleep, then threads are tried again;
 * each failed try doubles the wait (up to MAX_BACKOFF_NS). The bits are the
 * same either way. Called by the owner only. */
#define WINDOW_NS 2000000LL
#define MIN_BACKOFF_NS 20000000LL
#define MAX_BACKOFF_NS 640000000LL

static struct {
    long long busy_ns, backoff_ns;
    double helper_units, fair_units;
    int bad;  /* windows in a row where the helpers ran less than half their share */
} J;

static void judge(long long now, long long job_ns, uint64_t units, uint64_t mine, int threads)
{
    J.busy_ns += job_ns;
    J.helper_units += (double)(units - mine);
    J.fair_units += (double)units * (double)(threads - 1) / (double)threads;
    if (J.busy_ns < WINDOW_NS)
        return;
    if (J.helper_units * 2.0 >= J.fair_units) {
        J.bad = 0;
        J.backoff_ns = 0;
    } else if (++J.bad >= 2) {
        J.bad = 0;
        J.backoff_ns = J.backoff_ns ? J.backoff_ns * 2 : MIN_BACKOFF_NS;
        if (J.backoff_ns > MAX_BACKOFF_NS)
            J.backoff_ns = MAX_BACKOFF_NS;
        STORE(&P.serial_until, now + J.backoff_ns);
    }
    J.busy_ns = 0;
    J.helper_units = J.fair_units = 0.0;
}

static void *helper_main(void *p)
{
    const int me = (int)(intptr_t)p;
    uint64_t seen = LOAD(&P.seq) & ~(uint64_t)1;
    for (;;) {
        /* wait for a new, completely published job */
        long long spin_until = now_ns() + SPIN_NS;
        uint64_t s;
        for (unsigned i = 1;; i++) {
            s = LOAD(&P.seq);
            if (s != seen && !(s & 1))
                break;
            BC_PAUSE();
            if ((i & 255) == 0)
                sched_yield();  /* a busy machine: let a thread waiting for this core run */
            if ((i & 1023) == 0 && now_ns() > spin_until) {
                pthread_mutex_lock(&P.mu);
                ADD(&P.sleepers, 1);
                while (LOAD_SC(&P.seq) == seen)
                    pthread_cond_wait(&P.cv, &P.mu);
                ADD(&P.sleepers, -1);
                pthread_mutex_unlock(&P.mu);
                spin_until = now_ns() + SPIN_NS;
            }
        }
        const bc_unit_fn fn = (bc_unit_fn)LOAD(&P.fn);
        const void *arg = (const void *)LOAD(&P.arg);
        const uint64_t units = LOAD(&P.units);
        const int threads = LOAD(&P.threads);
        if (LOAD(&P.seq) != s)
            continue;  /* republished while we read: look again */
        seen = s;
        if (me < threads)
            work((uint32_t)(s >> 1), fn, arg, units, me);
    }
    return NULL;
}

/* Start helpers until there are want-1 of them (or creation fails). */
static int ensure_helpers(int want)
{
    int have = LOAD(&P.helpers);
    if (have >= want - 1)
        return have;
    pthread_mutex_lock(&P.mu);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);  /* helpers take no signals */
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    while (P.helpers < want - 1 && P.helpers < MAX_HELPERS) {
        pthread_t th;
        if (pthread_create(&th, &at, helper_main, (void *)(intptr_t)(P.helpers + 1)) != 0)
            break;
        STORE(&P.helpers, P.helpers + 1);
    }
    pthread_attr_destroy(&at);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    have = P.helpers;
    pthread_mutex_unlock(&P.mu);
    return have;
}

int bc_rt_pool_threads(int want)
{
    if (want <= 1 || LOAD(&P.forked))
        return 1;
    const int have = ensure_helpers(want);
    return have + 1 < want ? have + 1 : want;
}

void bc_rt_pool_forked(void) { STORE(&P.forked, 1); }

void bc_rt_run(int threads, size_t units, bc_unit_fn fn, const void *arg)
{
    int idle = 0;
    if (threads <= 1 || units <= 1 || units >= 0xffffffffu || LOAD(&P.forked)
        || now_ns() < LOAD(&P.serial_until) || !CAS(&P.busy, &idle, 1)) {
        run_serial(units, fn, arg);
        return;
    }
    threads = bc_rt_pool_threads(threads);
    const uint64_t s = P.seq;  /* only the owner writes seq */
    STORE_SC(&P.seq, s + 1);
    STORE(&P.fn, (uintptr_t)fn);
    STORE(&P.arg, (uintptr_t)arg);
    STORE(&P.units, (uint64_t)units);
    STORE(&P.threads, threads);
    STORE(&P.done, 0);
    const uint32_t id = (uint32_t)((s + 2) >> 1);
    STORE(&P.next, (uint64_t)id << 32);
    STORE_SC(&P.seq, s + 2);
    const int cold = LOAD_SC(&P.sleepers) > 0;  /* helpers asleep: they join late */
    if (cold) {
        pthread_mutex_lock(&P.mu);
        pthread_cond_broadcast(&P.cv);
        pthread_mutex_unlock(&P.mu);
    }
    const long long t0 = now_ns();
    const uint64_t mine = work(id, fn, arg, units, 0);
    /* the units helpers still hold: spin, then give a descheduled helper the core */
    for (unsigned i = 1; LOAD(&P.done) < units; i++) {
        BC_PAUSE();
        if ((i & 4095) == 0)
            sched_yield();
    }
    if (!cold)  /* waking up is not being descheduled: only awake helpers are judged */
        judge(now_ns(), now_ns() - t0, units, mine, threads);
    STORE(&P.busy, 0);
}

#endif
