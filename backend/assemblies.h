/* The tenants' assemblies: host processes' placed, and shown by vgpuctl list / show (assemblies.c). */
#ifndef VGPU_BACKEND_ASSEMBLIES_H
#define VGPU_BACKEND_ASSEMBLIES_H

#include "server.h"
#include "strbuf.h"

/* {"node":..,"tenants":[{"session","domain","domain_name","pid","uid","program","vgpus":[...]}]}:
 * every tenant the asker may see (which NULL), or one session ("ID") or domain ("dom:N", or its
 * name) in detail. */
void assemblies_json(struct server *srv, const struct session *asker, struct strbuf *b, const char *which);

/* Give host session s the assembly its entries (';'-separated vgpu entries) describe, placed on
 * this host's GPUs by their load (the other sessions' vGPUs) and free memory. 0, or -1 with why. */
int assemblies_place_host(struct server *srv, struct session *s, const char *text, char *why, size_t whylen);

#endif
