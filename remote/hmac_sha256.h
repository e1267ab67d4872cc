/* HMAC-SHA256 (RFC 2104, over common/sha256.h): what peers prove the cluster key with. */
#ifndef VGPU_REMOTE_HMAC_SHA256_H
#define VGPU_REMOTE_HMAC_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define SHA256_BYTES 32

/* HMAC-SHA256 of the n parts (data[i], len[i]) one after another, under key. */
void hmac_sha256(const void *key, size_t key_len, const void *const *data, const size_t *len, size_t n,
                 uint8_t out[SHA256_BYTES]);

/* Compare two MACs in time that does not depend on where they differ. */
int mac_equal(const uint8_t *a, const uint8_t *b, size_t n);

#endif
