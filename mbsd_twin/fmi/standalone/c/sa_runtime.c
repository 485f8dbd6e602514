/* The few runtime functions the engine's object code (engine_object.py) references beyond libc and
   libm: numba's reference-counted allocation (NRT_MemInfo_alloc_aligned, NRT_MemInfo_call_dtor,
   with numba's MemInfo layout; the inline NRT_incref/NRT_decref of the object code work on it) and
   numba_nextafter. Memory comes from malloc; a block holds its MemInfo and the data. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

typedef void (*dtor_fn)(void *data, size_t size, void *info);
typedef struct {
    size_t refct;
    dtor_fn dtor;
    void *dtor_info;
    void *data;
    size_t size;
    void *external_allocator;
} MemInfo;

MemInfo *NRT_MemInfo_alloc_aligned(size_t size, unsigned align);
void NRT_MemInfo_call_dtor(MemInfo *mi);
double numba_nextafter(double a, double b);

MemInfo *NRT_MemInfo_alloc_aligned(size_t size, unsigned align) {
    if (align == 0) align = 1;
    char *base = malloc(sizeof(MemInfo) + size + 2 * (size_t)align);
    if (!base) return NULL;
    MemInfo *mi = (MemInfo *)base;
    uintptr_t d = (uintptr_t)(base + sizeof(MemInfo));
    uintptr_t rem = d % align;
    if (rem) d += align - rem;
    mi->refct = 1;
    mi->dtor = NULL;
    mi->dtor_info = NULL;
    mi->data = (void *)d;
    mi->size = size;
    mi->external_allocator = NULL;
    return mi;
}

void NRT_MemInfo_call_dtor(MemInfo *mi) {
    if (mi->dtor) mi->dtor(mi->data, mi->size, mi->dtor_info);
    free(mi);
}

double numba_nextafter(double a, double b) { return nextafter(a, b); }
