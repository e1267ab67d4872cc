/* What the GPU driver prints for the tenant on its stdout and stderr (the output of kernels'
 * printf, flushed at synchronising calls; a device-side assert's message): kept here and sent to
 * the client ahead of the next response. */
#ifndef VGPU_WORKER_CONSOLE_H
#define VGPU_WORKER_CONSOLE_H

#include <stdbool.h>
#include <stddef.h>

/* Point the process's stdout and stderr streams at the console (a worker, before it serves
 * anyone; the logger writes to the descriptor itself). 0, or -1. */
int console_capture(void);
/* Whether something waits to be sent (cheap: one load). */
bool console_pending(void);
/* Take up to cap bytes of what waits on one stream, oldest first: how many, and the stream's
 * descriptor number in *fd (1: stdout, 2: stderr). */
size_t console_take(int *fd, char *buf, size_t cap);

#endif
