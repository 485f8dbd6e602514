/* mbsd_live, which native_fmu's fmi2_misc.c / fmi3_misc.c and this layer's FMI functions call first:
   whether c is an instance this library made and has not freed. The instance carries a tag and a
   pointer to itself, set by sa_new and cleared by sa_free before the memory is released (sa_core.c).

   Not a registry of instances in the library's static memory, as the host-independent FMU keeps
   (native_fmu/live_registry.c): a host may unload and load the library again while its instances
   live (Ecos does, between two instantiations of one FMU), which empties such a registry and left
   the first instance refused. */
#include "sa_core.h"

int mbsd_live(void *c);

int mbsd_live(void *c) {
    const SaInst *s = c;
    return s != 0 && s->tag == SA_TAG && s->self == s;
}
