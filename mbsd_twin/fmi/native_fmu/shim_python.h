/* Where the host-independent FMU finds the worker's Python interpreter (shim_python.c), and the
   resources' one-line files. */
#ifndef MBSD_SHIM_PYTHON_H
#define MBSD_SHIM_PYTHON_H

#include <stddef.h>

#define PYTHON_ENV "MBSD_TWIN_FMU_PYTHON"
#define PYTHON_FILE "mbsd_twin_python.txt"

/* The worker's interpreter into python[n] and where it came from into origin[n_origin] (shim_python.c):
   0; 1 when places before it were passed over (why[n_why] says why); -1 when none works (why[n_why]
   gives the reason for each of the three places). */
int core_find_python(const char *res, char *python, size_t n, char *origin, size_t n_origin, char *why, size_t n_why);
int core_read_line(const char *res, const char *file, char *buf, size_t n);

#endif
