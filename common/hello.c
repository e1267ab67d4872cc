#include "hello.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "msg_socket.h"

int vgpu_hello_make(struct vgpu_msg_hello *h, uint32_t role, bool with_assembly)
{
    memset(h, 0, sizeof *h);
    vgpu_msg_init(&h->hdr, VGPU_MSG_HELLO, sizeof *h);
    h->role = role;
    FILE *f = fopen("/proc/self/comm", "r");
    if (!f || !fgets(h->program, sizeof h->program, f))
        snprintf(h->program, sizeof h->program, "?");
    h->program[strcspn(h->program, "\n")] = '\0';
    if (f)
        fclose(f);
    const char *assembly = getenv("VGPU_ASSEMBLY");
    if (!with_assembly || !assembly)
        return 0;
    if (strlen(assembly) >= sizeof h->assembly) {
        LOG_WARN("VGPU_ASSEMBLY is too long (at most %zu bytes); no CUDA devices", sizeof h->assembly - 1);
        return -1;
    }
    snprintf(h->assembly, sizeof h->assembly, "%s", assembly);
    return 0;
}
