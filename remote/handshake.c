#include "handshake.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

bool remote_node_name_ok(const char *name)
{
    size_t n = strnlen(name, REMOTE_NODE_NAME);
    if (n == 0 || n >= REMOTE_NODE_NAME)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
              c == '.'))
            return false;
    }
    return true;
}

static int fail(struct hs *h, const char *why)
{
    h->state = HS_FAILED;
    h->why = why;
    return -1;
}

static int nonce(uint8_t *p)
{
    size_t got = 0;
    while (got < REMOTE_NONCE) {
        ssize_t r = getrandom(p + got, REMOTE_NONCE - got, 0);
        if (r < 0 && errno != EINTR)
            return -1;
        got += r > 0 ? (size_t)r : 0;
    }
    return 0;
}

static int start(struct hs *h, const void *key, size_t key_len, const char *self, bool dialer)
{
    memset(h, 0, sizeof *h);
    h->dialer = dialer;
    if (key_len == 0 || key_len > sizeof h->key)
        return fail(h, "a cluster key of 1 to 256 bytes is needed");
    if (!remote_node_name_ok(self))
        return fail(h, "this node's name is not valid");
    memcpy(h->key, key, key_len);
    h->key_len = key_len;
    strcpy(h->self, self);
    if (nonce(h->mine) != 0)
        return fail(h, "no random numbers");
    return 0;
}

static void header(struct hs_msg *m, enum hs_type type, const char *self)
{
    memset(m, 0, sizeof *m);
    m->magic = REMOTE_MAGIC;
    m->version = REMOTE_WIRE_VERSION;
    m->type = (uint16_t)type;
    strcpy(m->node, self);
}

/* The MAC a side proves the key with: role, its partner's nonce, its own, the dialer's name and
 * the listener's (so that no MAC proves anything in another role, session or pairing). */
static void prove(const struct hs *h, const char *role, const uint8_t *first, const uint8_t *second,
                  uint8_t out[SHA256_BYTES])
{
    const char *dialer = h->dialer ? h->self : h->peer, *listener = h->dialer ? h->peer : h->self;
    const void *parts[] = {role, first, second, dialer, listener};
    const size_t len[] = {strlen(role) + 1, REMOTE_NONCE, REMOTE_NONCE, strlen(dialer) + 1, strlen(listener) + 1};
    hmac_sha256(h->key, h->key_len, parts, len, 5, out);
}

int hs_dial(struct hs *h, const void *key, size_t key_len, const char *self, struct hs_msg *out)
{
    if (start(h, key, key_len, self, true) != 0)
        return -1;
    header(out, HS_HELLO, self);
    memcpy(out->nonce, h->mine, REMOTE_NONCE);
    h->state = HS_SENT_HELLO;
    return 0;
}

int hs_listen(struct hs *h, const void *key, size_t key_len, const char *self)
{
    return start(h, key, key_len, self, false);
}

/* The MAC the peer sent in role proves that it holds the key. */
static int check_proof(struct hs *h, const char *role, const uint8_t *first, const uint8_t *second,
                       const uint8_t *mac)
{
    uint8_t want[SHA256_BYTES];
    prove(h, role, first, second, want);
    return mac_equal(want, mac, SHA256_BYTES) ? 0 : fail(h, "the peer does not hold the cluster key");
}

/* The peer's name and nonce, from its HELLO or CHALLENGE. */
static int take_peer(struct hs *h, const struct hs_msg *m)
{
    if (memchr(m->node, 0, sizeof m->node) == NULL || !remote_node_name_ok(m->node))
        return fail(h, "the peer's node name is not valid");
    strcpy(h->peer, m->node);
    memcpy(h->theirs, m->nonce, REMOTE_NONCE);
    return 0;
}

int hs_receive(struct hs *h, const void *msg, size_t len, struct hs_msg *out)
{
    if (h->state == HS_DONE || h->state == HS_FAILED)
        return fail(h, "a message after the handshake ended");
    struct hs_msg m;
    if (len != sizeof m)
        return fail(h, "a handshake message of the wrong size");
    memcpy(&m, msg, sizeof m);
    if (m.magic != REMOTE_MAGIC)
        return fail(h, "not a vgpud (wrong magic)");
    if (m.version != REMOTE_WIRE_VERSION)
        return fail(h, "another version of the link protocol");
    switch (h->state) {
    case HS_IDLE: /* the listener gets HELLO */
        if (h->dialer || m.type != HS_HELLO)
            return fail(h, "expected HELLO");
        if (take_peer(h, &m) != 0)
            return -1;
        header(out, HS_CHALLENGE, h->self);
        memcpy(out->nonce, h->mine, REMOTE_NONCE);
        prove(h, "listener", h->theirs, h->mine, out->mac);
        h->state = HS_SENT_CHALLENGE;
        return 1;
    case HS_SENT_HELLO: /* the dialer gets CHALLENGE */
        if (m.type != HS_CHALLENGE)
            return fail(h, "expected CHALLENGE");
        if (take_peer(h, &m) != 0)
            return -1;
        if (check_proof(h, "listener", h->mine, h->theirs, m.mac) != 0)
            return -1;
        header(out, HS_PROVE, h->self);
        prove(h, "dialer", h->theirs, h->mine, out->mac);
        h->state = HS_DONE;
        return 1;
    case HS_SENT_CHALLENGE: /* the listener gets PROVE */
        if (m.type != HS_PROVE)
            return fail(h, "expected PROVE");
        if (check_proof(h, "dialer", h->mine, h->theirs, m.mac) != 0)
            return -1;
        h->state = HS_DONE;
        return 0;
    default:
        return fail(h, "unexpected message");
    }
}

int remote_key_load(const char *path, uint8_t *key, size_t *len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    uint8_t buf[REMOTE_KEY_MAX + 2];
    ssize_t n = read(fd, buf, sizeof buf);
    int e = errno;
    close(fd);
    if (n < 0)
        return -e;
    if (n > 0 && buf[n - 1] == '\n')
        n--;
    if (n == 0 || n > REMOTE_KEY_MAX)
        return -EINVAL;
    memcpy(key, buf, (size_t)n);
    *len = (size_t)n;
    return 0;
}
