#include "etcd.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>

#include "base64.h"
#include "bell.h"
#include "json.h"
#include "log.h"

#define PREFIX "/vgpu/nodes/"
#define MAX_REPLY (4u << 20)

struct etcd {
    struct etcd_config cfg;
    pthread_t thread, watcher;
    CURL *http; /* the loop's requests, on one connection kept open (the loop's thread only) */
    bool watching; /* the watcher thread was started */
    atomic_bool changed; /* the watch saw a change: read the nodes again now */
    int wake[2];
    atomic_bool stop;
    char lease[32]; /* the lease's id (decimal), empty: none */
    char *put_value;       /* this node's entry as last put (NULL: not yet) */
    char put_lease[32];    /* under which lease */
    pthread_mutex_t mu; /* what the loop read, for the view */
    bool reachable, read;
    char error[160];
    struct etcd_node *nodes;
    unsigned count;
};

int etcd_url_parse(const char *spec, char *url, size_t n)
{
    const char *scheme = "etcd://";
    if (strncmp(spec, scheme, strlen(scheme)) != 0)
        return -1;
    const char *hp = spec + strlen(scheme);
    char host[128];
    uint16_t port;
    if (remote_addr_parse(hp, host, sizeof host, &port) != 0)
        return -1;
    int w = snprintf(url, n, "http://%s", hp);
    return w > 0 && (size_t)w < n ? 0 : -1;
}

/* ---------------------------------------------------------------- the gateway */

struct reply {
    char *text;
    size_t len;
    bool too_long;
};

static size_t take(char *data, size_t size, size_t n, void *arg)
{
    struct reply *r = arg;
    size_t add = size * n;
    if (r->len + add > MAX_REPLY) {
        r->too_long = true;
        return 0;
    }
    char *t = realloc(r->text, r->len + add + 1);
    if (!t)
        return 0;
    memcpy(t + r->len, data, add);
    r->text = t;
    r->len += add;
    t[r->len] = '\0';
    return add;
}

/* POST body to the gateway's path; the answer parsed (NULL: unreachable or not JSON; e->error says).
 * The loop's thread only: its requests share one handle, and so one connection. */
static struct json *post(struct etcd *e, const char *path, const char *body)
{
    if (!e->http && !(e->http = curl_easy_init()))
        return NULL;
    CURL *c = e->http;
    char url[256];
    snprintf(url, sizeof url, "%s%s", e->cfg.url, path);
    struct reply r = {0};
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, take);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &r);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 2000L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 1000L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    CURLcode rc = curl_easy_perform(c);
    struct json *j = rc == CURLE_OK && r.text ? json_parse(r.text) : NULL;
    pthread_mutex_lock(&e->mu);
    if (rc != CURLE_OK)
        snprintf(e->error, sizeof e->error, "%s", curl_easy_strerror(rc));
    else if (!j)
        snprintf(e->error, sizeof e->error, "%s", r.too_long ? "an answer too long" : "an answer that is not JSON");
    pthread_mutex_unlock(&e->mu);
    free(r.text);
    return j;
}

static bool grant(struct etcd *e)
{
    char body[64];
    snprintf(body, sizeof body, "{\"TTL\":%u}", e->cfg.ttl_s);
    struct json *j = post(e, "/v3/lease/grant", body);
    const char *id = json_string(json_get(j, "ID"), NULL);
    bool ok = id && strlen(id) < sizeof e->lease && strspn(id, "0123456789") == strlen(id);
    if (ok)
        snprintf(e->lease, sizeof e->lease, "%s", id);
    json_free(j);
    return ok;
}

/* Renew the lease; false when it is gone (expired while etcd could not be reached). */
static bool keepalive(struct etcd *e)
{
    char body[96];
    snprintf(body, sizeof body, "{\"ID\":\"%s\"}", e->lease);
    struct json *j = post(e, "/v3/lease/keepalive", body);
    bool alive = json_number(json_path(j, "result.TTL"), 0) > 0 ||
                 atoi(json_string(json_path(j, "result.TTL"), "0")) > 0;
    json_free(j);
    return alive;
}

static bool put_self(struct etcd *e)
{
    struct etcd_node self = {0};
    snprintf(self.name, sizeof self.name, "%s", e->cfg.node);
    snprintf(self.address, sizeof self.address, "%s", e->cfg.address);
    if (e->cfg.inventory)
        self.ngpus = e->cfg.inventory(e->cfg.inventory_arg, self.gpus, REMOTE_MAX_GPUS);
    struct strbuf v = {0}, body = {0};
    etcd_node_json(&self, &v);
    size_t vlen = 0;
    char *value = strbuf_take(&v, &vlen);
    /* Unchanged under the same lease: the entry stands (every put wakes every node's watch). */
    if (value && e->put_value && strcmp(value, e->put_value) == 0 && strcmp(e->lease, e->put_lease) == 0) {
        free(value);
        return true;
    }
    char key[160], key64[224];
    snprintf(key, sizeof key, PREFIX "%s", e->cfg.node);
    base64_encode(key, strlen(key), key64);
    char *value64 = value ? malloc(4 * ((vlen + 2) / 3) + 1) : NULL;
    bool ok = false;
    if (value64) {
        base64_encode(value, vlen, value64);
        strbuf_printf(&body, "{\"key\":\"%s\",\"value\":\"%s\",\"lease\":\"%s\"}", key64, value64, e->lease);
        char *text = strbuf_take(&body, NULL);
        struct json *j = text ? post(e, "/v3/kv/put", text) : NULL;
        ok = j && json_get(j, "header") && !json_get(j, "error");
        json_free(j);
        free(text);
    }
    free(value64);
    if (ok) {
        free(e->put_value);
        e->put_value = value;
        snprintf(e->put_lease, sizeof e->put_lease, "%s", e->lease);
    } else {
        free(value);
    }
    return ok;
}

/* Every node's entry. */
static bool read_nodes(struct etcd *e)
{
    char from[64], to[64];
    base64_encode(PREFIX, strlen(PREFIX), from);
    char end[] = PREFIX;
    end[strlen(end) - 1]++; /* the first key after the prefix's range */
    base64_encode(end, strlen(end), to);
    char body[192];
    snprintf(body, sizeof body, "{\"key\":\"%s\",\"range_end\":\"%s\"}", from, to);
    struct json *j = post(e, "/v3/kv/range", body);
    if (!j || !json_get(j, "header")) {
        json_free(j);
        return false;
    }
    struct etcd_node *nodes = calloc(ETCD_MAX_NODES, sizeof *nodes);
    unsigned n = 0;
    const struct json *kvs = json_get(j, "kvs");
    static uint8_t buf[64 * 1024];
    for (const struct json *kv = kvs ? kvs->child : NULL; nodes && kv && n < ETCD_MAX_NODES; kv = kv->next) {
        long len = base64_decode(json_string(json_get(kv, "value"), ""), buf, sizeof buf - 1);
        if (len < 0)
            continue;
        buf[len] = '\0';
        if (etcd_node_parse((const char *)buf, &nodes[n]) == 0)
            n++;
    }
    json_free(j);
    if (!nodes)
        return false;
    pthread_mutex_lock(&e->mu);
    free(e->nodes);
    e->nodes = nodes;
    e->count = n;
    e->read = true;
    pthread_mutex_unlock(&e->mu);
    return true;
}

/* ---------------------------------------------------------------- the watch
 * A watch on the nodes' prefix (a streaming answer of etcd's gateway): any event wakes the loop to
 * read them again at once, rather than at its next period. */

static size_t watched(char *data, size_t size, size_t n, void *arg)
{
    struct etcd *e = arg;
    if (memmem(data, size * n, "\"events\"", 8)) {
        atomic_store(&e->changed, true);
        if (write(e->wake[1], "w", 1) < 0) {
            /* the loop reads them within its period anyway */
        }
    }
    return size * n;
}

/* Lets a watch's transfer end when vgpud stops (libcurl asks about once a second). */
static int still_watching(void *arg, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
    (void)dt, (void)dn, (void)ut, (void)un;
    const struct etcd *e = arg;
    return atomic_load(&e->stop) ? 1 : 0;
}

static void *watch_main(void *arg)
{
    struct etcd *e = arg;
    char from[64], to[64], url[256], body[192];
    base64_encode(PREFIX, strlen(PREFIX), from);
    char end[] = PREFIX;
    end[strlen(end) - 1]++;
    base64_encode(end, strlen(end), to);
    snprintf(url, sizeof url, "%s/v3/watch", e->cfg.url);
    snprintf(body, sizeof body, "{\"create_request\":{\"key\":\"%s\",\"range_end\":\"%s\"}}", from, to);
    while (!atomic_load(&e->stop)) {
        CURL *c = curl_easy_init();
        if (c) {
            curl_easy_setopt(c, CURLOPT_URL, url);
            curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
            curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, watched);
            curl_easy_setopt(c, CURLOPT_WRITEDATA, e);
            curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
            curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, still_watching);
            curl_easy_setopt(c, CURLOPT_XFERINFODATA, e);
            curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 1000L);
            curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
            curl_easy_perform(c); /* until etcd goes or vgpud stops */
            curl_easy_cleanup(c);
        }
        struct pollfd p = {.fd = -1};
        for (int i = 0; i < 10 && !atomic_load(&e->stop); i++) /* a second before watching again */
            poll(&p, 0, 100);
    }
    return NULL;
}

static void *etcd_main(void *arg)
{
    struct etcd *e = arg;
    unsigned period_ms = e->cfg.ttl_s * 1000 / 3;
    period_ms = period_ms < 300 ? 300 : period_ms > 1000 ? 1000 : period_ms;
    bool was_reachable = true;
    uint64_t next_renew = 0;
    while (!atomic_load(&e->stop)) {
        uint64_t now = (uint64_t)vgpu_now_ns() / 1000000;
        bool renew = now >= next_renew;
        atomic_store(&e->changed, false);
        bool ok = true;
        if (renew) { /* the lease and this node's entry, each period; the others' on every change too */
            ok = (e->lease[0] && keepalive(e)) || grant(e);
            ok = ok && put_self(e);
            next_renew = now + period_ms;
        }
        ok = read_nodes(e) && ok;
        if (!ok && e->lease[0] && !keepalive(e))
            e->lease[0] = '\0'; /* gone: a new one next time */
        pthread_mutex_lock(&e->mu);
        e->reachable = ok;
        if (ok)
            e->error[0] = '\0';
        pthread_mutex_unlock(&e->mu);
        if (ok != was_reachable)
            LOG_WARN("cluster: etcd at %s %s", e->cfg.url, ok ? "reachable again" : "cannot be reached");
        was_reachable = ok;
        struct pollfd p = {.fd = e->wake[0], .events = POLLIN};
        if (poll(&p, 1, (int)period_ms) > 0) {
            char drain[64];
            if (read(e->wake[0], drain, sizeof drain) < 0) {
                /* nothing to drain */
            }
        }
    }
    if (e->lease[0]) { /* leave at once rather than when the lease runs out */
        char body[96];
        snprintf(body, sizeof body, "{\"ID\":\"%s\"}", e->lease);
        json_free(post(e, "/v3/lease/revoke", body));
    }
    if (e->http)
        curl_easy_cleanup(e->http);
    return NULL;
}

struct etcd *etcd_start(const struct etcd_config *cfg, const char **err)
{
    *err = "out of memory";
    struct etcd *e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    e->cfg = *cfg;
    if (e->cfg.ttl_s < 2)
        e->cfg.ttl_s = 2;
    pthread_mutex_init(&e->mu, NULL);
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        *err = "libcurl cannot start";
    } else if (pipe2(e->wake, O_CLOEXEC | O_NONBLOCK) != 0 || pthread_create(&e->thread, NULL, etcd_main, e) != 0) {
        *err = "cannot start the cluster thread";
    } else {
        e->watching = pthread_create(&e->watcher, NULL, watch_main, e) == 0; /* without it, polling */
        LOG_INFO("cluster: node %s in etcd at %s (lease %u s)", cfg->node, cfg->url, e->cfg.ttl_s);
        return e;
    }
    pthread_mutex_destroy(&e->mu);
    free(e);
    return NULL;
}

void etcd_stop(struct etcd *e)
{
    if (!e)
        return;
    atomic_store(&e->stop, true);
    if (write(e->wake[1], "x", 1) < 0) {
        /* it wakes within its period anyway */
    }
    pthread_join(e->thread, NULL);
    if (e->watching)
        pthread_join(e->watcher, NULL);
    close(e->wake[0]);
    close(e->wake[1]);
    free(e->nodes);
    free(e->put_value);
    pthread_mutex_destroy(&e->mu);
    free(e);
    curl_global_cleanup();
}

bool etcd_nodes(struct etcd *e, struct etcd_node *out, unsigned max, unsigned *count)
{
    pthread_mutex_lock(&e->mu);
    bool ok = e->read && e->reachable;
    unsigned n = ok ? (e->count < max ? e->count : max) : 0;
    if (n)
        memcpy(out, e->nodes, n * sizeof *out);
    *count = n;
    pthread_mutex_unlock(&e->mu);
    return ok;
}

void etcd_view_json(struct etcd *e, struct strbuf *b)
{
    pthread_mutex_lock(&e->mu);
    strbuf_printf(b, "\"etcd\":{\"url\":");
    strbuf_json_string(b, e->cfg.url);
    strbuf_printf(b, ",\"state\":\"%s\",\"error\":", e->reachable ? "ok" : e->read ? "unreachable" : "starting");
    strbuf_json_string(b, e->error);
    strbuf_printf(b, ",\"ttl_s\":%u,\"nodes\":[", e->cfg.ttl_s);
    for (unsigned i = 0; e->reachable && i < e->count; i++) {
        if (i)
            strbuf_printf(b, ",");
        etcd_node_json(&e->nodes[i], b);
    }
    strbuf_printf(b, "]}");
    pthread_mutex_unlock(&e->mu);
}
