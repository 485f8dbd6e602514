/* The registry of an FMU library's live instances, shared by the host-independent FMU (shim_core.c)
   and the standalone FMU (standalone/c/sa_core.c, also compiled from a source FMU's sources/).

   Every FMI entry point asks it whether its instance argument is one this library made and has not
   freed: a NULL or freed instance is then an Error, never a read of freed memory. The registry holds
   addresses only and never dereferences them. It is guarded by a spin lock on GCC/Clang atomic
   builtins, so it needs neither pthreads nor C11 (a source FMU compiles as C99 on targets without
   threads); instantiate and free are rare, and a lookup is a short scan. */
#ifndef MBSD_LIVE_REGISTRY_H
#define MBSD_LIVE_REGISTRY_H

/* Record p as live: 1, or 0 when out of memory. */
int mbsd_live_add(const void *p);
/* Forget p: 1 if it was live, 0 if not (NULL, never made, or freed already). */
int mbsd_live_remove(const void *p);
/* 1 if p is live, else 0 (NULL: 0). */
int mbsd_live_has(const void *p);

#endif
