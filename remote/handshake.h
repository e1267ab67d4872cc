/* How two vgpuds prove to each other that both hold the cluster key, before either serves the
 * other (mutual challenge-response; the key itself never crosses the network):
 *   dialer   -> listener  HELLO     its node name, a fresh nonce Nd
 *   listener -> dialer    CHALLENGE its node name, a fresh nonce Nl, MAC(key, "listener", Nd, Nl, names)
 *   dialer   -> listener  PROVE     MAC(key, "dialer", Nl, Nd, names)
 * Each side checks the other's MAC against its own key; a peer that does not hold it gets nothing
 * but the listener's challenge (over nonces it cannot choose twice). Messages are exact-size
 * records; everything received is checked before use.
 *
 * Pure protocol: bytes in, bytes out; the link (link.c) carries them. */
#ifndef VGPU_REMOTE_HANDSHAKE_H
#define VGPU_REMOTE_HANDSHAKE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hmac_sha256.h"

#define REMOTE_NODE_NAME 64 /* bytes with the terminating NUL */
#define REMOTE_NONCE 32
#define REMOTE_KEY_MAX 256  /* bytes of cluster key at most */
#define REMOTE_WIRE_VERSION 5

enum hs_type { HS_HELLO = 1, HS_CHALLENGE = 2, HS_PROVE = 3 };

struct hs_msg {
    uint32_t magic; /* REMOTE_MAGIC */
    uint16_t version;
    uint16_t type;
    char node[REMOTE_NODE_NAME];
    uint8_t nonce[REMOTE_NONCE];
    uint8_t mac[SHA256_BYTES];
};
#define REMOTE_MAGIC 0x76677031u /* "vgp1" */

enum hs_state { HS_IDLE, HS_SENT_HELLO, HS_SENT_CHALLENGE, HS_DONE, HS_FAILED };

struct hs {
    enum hs_state state;
    bool dialer;
    uint8_t key[REMOTE_KEY_MAX];
    size_t key_len;
    char self[REMOTE_NODE_NAME], peer[REMOTE_NODE_NAME];
    uint8_t mine[REMOTE_NONCE], theirs[REMOTE_NONCE];
    const char *why; /* when failed: what went wrong, for the log */
};

/* A valid node name: 1..63 characters of letters, digits, '-', '_' and '.'. */
bool remote_node_name_ok(const char *name);

/* Start as the side that dials (out: the HELLO to send) or the side that listens. 0, or -1 with
 * hs->why set (a bad name or key). */
int hs_dial(struct hs *h, const void *key, size_t key_len, const char *self, struct hs_msg *out);
int hs_listen(struct hs *h, const void *key, size_t key_len, const char *self);

/* Take a message from the peer (len bytes at msg). Returns 1 and fills *out when there is an
 * answer to send, 0 when the handshake is done (h->peer is the peer's name), -1 when it failed
 * (h->why). After a failure or completion every further message fails. */
int hs_receive(struct hs *h, const void *msg, size_t len, struct hs_msg *out);

/* Read a cluster key file: its bytes, without one trailing newline (1..REMOTE_KEY_MAX). 0 or -errno
 * (-EINVAL: empty or too long). */
int remote_key_load(const char *path, uint8_t *key, size_t *len);

#endif
