/* What the GPU driver prints for the tenant on its stdout (the output of kernels' printf, flushed
 * at synchronising calls): kept here and sent to the client ahead of the next response. */
#ifndef VGPU_WORKER_CONSOLE_H
#define VGPU_WORKER_CONSOLE_H

#include <stdbool.h>
#include <stddef.h>

/* Point the process's stdout at the console (a worker, before it serves anyone). 0, or -1. */
int console_capture(void);
/* Whether something waits to be sent (cheap: one load). */
bool console_pending(void);
/* Take up to cap bytes of what waits, oldest first: how many. */
size_t console_take(char *buf, size_t cap);

#endif
