/* mbsd_live, which native_fmu's fmi2_misc.c / fmi3_misc.c call since the host-independent FMU's
   hardening (a registry of live instances there): here a non-NULL instance counts as live (the
   standalone layer keeps no registry of instances). */
int mbsd_live(void *c);

int mbsd_live(void *c) { return c != 0; }
