/* Logging into an FMI 3.0 host, shared by the host-independent (fmi3_shim.c) and standalone
   (standalone/c/sa_fmi3.c) libraries: a static function in each file that includes it. */
#ifndef MBSD_LOG_FMI3_H
#define MBSD_LOG_FMI3_H

#include "fmi3Functions.h"

/* Log `text` through the host's logger, the category the status's. */
static void mbsd_fmi3_log(fmi3LogMessageCallback logger, fmi3InstanceEnvironment env, int status, const char *text) {
    static const char *cats[] = {"logStatusOK", "logStatusWarning", "logStatusDiscard", "logStatusError",
                                 "logStatusFatal"};
    if (logger) logger(env, (fmi3Status)status, status >= 0 && status <= 4 ? cats[status] : "logAll", text);
}

#endif
