/* The worker of the host-independent FMU: start it, call it, stop it (worker_link.c). The link's
   frames, shared page and state: worker_frames.h. */
#ifndef MBSD_WORKER_LINK_H
#define MBSD_WORKER_LINK_H

#include "worker_frames.h"

/* Start the worker and wait until it has loaded the model. Returns 0, or -1 with the reason logged. */
int link_start(WorkerLink *w, const char *python, const char *python_origin, const char *resources,
               const char *instance_name);
/* Send a request and read the reply into w (status, reals, bytes; logs passed to w->log).
   Returns 0, or -1 when the worker is gone (logged once, w->dead set). */
int link_call(WorkerLink *w, const Request *rq);
/* Free the buffers and return at once; a detached thread tells the worker to quit (kind 0 in the
   shared page, EOF on its stdin), closes the link and reaps the worker (SIGKILL after 5 s). */
void link_stop(WorkerLink *w);

#endif
