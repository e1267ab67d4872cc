/* Which parts of a channel's data area a request record reads and writes, for whoever carries the
 * record to a data area of its own (a remote vGPU's relay and the worker serving it on the other
 * node): the bytes it reads travel before it, the bytes it writes come back before its response or
 * its staging slot's completion. Calls whose data-area use is not described here (pinned memory the
 * device maps, registered memory) are not offered for remote vGPUs by the frontend. */
#ifndef VGPU_RECORD_IO_H
#define VGPU_RECORD_IO_H

#include <stdbool.h>
#include <stdint.h>

#include "channel.h"

struct record_io {
    unsigned op;
    bool reply;               /* its caller waits for a response */
    uint64_t in_off, in_size; /* read from the data area (in_size 0: nothing) */
    uint64_t out_off, out_size; /* written to it */
    uint32_t slot;            /* the staging slot it completes, or VGPU_NO_SLOT */
    uint64_t word;            /* a host function's handshake word (HostFn with a ticket), or UINT64_MAX */
    uint32_t ticket;
};

/* Describe the len-byte record at rec (its header checked against the call table). Ranges outside
 * the data area and slots outside the layout are left out (the serving worker refuses them). 0, or
 * -1 when the record is not one of the table's. */
int record_io_of(const uint8_t *rec, uint32_t len, const struct vgpu_channel_layout *l, struct record_io *io);

#endif
