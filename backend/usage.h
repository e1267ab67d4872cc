/* What a tenant's NVML asks vgpud (VGPU_MSG_USAGE): how its principal's tenants use its vGPUs. */
#ifndef VGPU_USAGE_H
#define VGPU_USAGE_H

#include <stddef.h>

#include "server.h"

/* Answer session s's VGPU_MSG_USAGE (buf, len); < 0 when the message is bad or cannot be sent. */
int usage_answer(struct server *srv, struct session *s, const void *buf, size_t len);

#endif
