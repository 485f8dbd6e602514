/* mbsd_live, which native_fmu's fmi2_misc.c / fmi3_misc.c and this layer's FMI functions call first:
   whether c is an instance this library made and has not freed (native_fmu/live_registry.c, the
   registry the host-independent FMU uses too). */
#include "live_registry.h"

int mbsd_live(void *c);

int mbsd_live(void *c) { return mbsd_live_has(c); }
