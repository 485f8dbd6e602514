/* Logging into an FMI 2.0 host, shared by the host-independent (fmi2_shim.c) and standalone
   (standalone/c/sa_fmi2.c) libraries: a static function in each file that includes it, so that
   neither library's C files call each other for it. */
#ifndef MBSD_LOG_FMI2_H
#define MBSD_LOG_FMI2_H

#include <stdlib.h>
#include <string.h>

#include "fmi2Functions.h"

/* Log `text` through the host's logger: the logger treats the message as a format, so '%' is
   passed doubled; the category is the status's (logStatusError, ...). */
static void mbsd_fmi2_log(const fmi2CallbackFunctions *cb, const char *name, int status, const char *text) {
    static const char *cats[] = {"logStatusOK", "logStatusWarning", "logStatusDiscard", "logStatusError",
                                 "logStatusFatal", "logStatusPending"};
    if (!cb->logger) return;
    size_t n = strlen(text);
    char *esc = malloc(2 * n + 1), *q = esc;
    if (!esc) return;
    for (const char *p = text; *p; p++) { *q++ = *p; if (*p == '%') *q++ = '%'; }
    *q = '\0';
    cb->logger(cb->componentEnvironment, name, (fmi2Status)status, status >= 0 && status <= 5 ? cats[status] : "logAll",
               esc);
    free(esc);
}

#endif
