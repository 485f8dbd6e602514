/* The shared page of the worker link (worker_shm.c; its layout: worker_frames.h): the steps
   without socket messages. */
#ifndef MBSD_WORKER_SHM_H
#define MBSD_WORKER_SHM_H

#include "worker_frames.h"

int shm_create(WorkerLink *w);   /* the memfd and its mapping: 0, or -1 (then the socket only) */
int shm_call(WorkerLink *w, const Request *rq);
void shm_destroy(WorkerLink *w);
void shm_quit(WorkerLink *w);  /* wake the worker with kind 0: it returns */

#endif
