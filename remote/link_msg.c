#include "link_msg.h"

#include <string.h>

int link_msg_decode(const void *p, size_t len, struct link_msg *out)
{
    if (len != sizeof *out)
        return -1;
    memcpy(out, p, sizeof *out);
    if (out->magic != REMOTE_MAGIC || out->version != REMOTE_WIRE_VERSION || out->reserved != 0)
        return -1;
    if (out->type != LINK_WELCOME && out->type != LINK_PING && out->type != LINK_PONG)
        return -1;
    if (out->ngpus > REMOTE_MAX_GPUS)
        return -1;
    for (uint32_t i = 0; i < out->ngpus; i++) {
        struct remote_gpu *g = &out->gpus[i];
        if (!memchr(g->name, 0, sizeof g->name) || g->free > g->total)
            return -1;
    }
    return 0;
}
