/* The registry of live instances (see live_registry.h). */
#include "live_registry.h"

#include <stdlib.h>

static char busy;  /* the spin lock */
static const void **live;
static size_t n_live, cap_live;

static void lock(void) {
    while (__atomic_test_and_set(&busy, __ATOMIC_ACQUIRE)) continue;
}

static void unlock(void) { __atomic_clear(&busy, __ATOMIC_RELEASE); }

int mbsd_live_add(const void *p) {
    int ok = 1;
    lock();
    if (n_live == cap_live) {
        const void **grown = realloc((void *)live, (2 * cap_live + 8) * sizeof *grown);
        if (grown) { live = grown; cap_live = 2 * cap_live + 8; } else ok = 0;
    }
    if (ok) live[n_live++] = p;
    unlock();
    return ok;
}

int mbsd_live_remove(const void *p) {
    int found = 0;
    if (!p) return 0;
    lock();
    for (size_t i = 0; i < n_live && !found; i++)
        if (live[i] == p) { live[i] = live[--n_live]; found = 1; }
    unlock();
    return found;
}

int mbsd_live_has(const void *p) {
    int found = 0;
    if (!p) return 0;
    lock();
    for (size_t i = 0; i < n_live && !found; i++) found = live[i] == p;
    unlock();
    return found;
}
