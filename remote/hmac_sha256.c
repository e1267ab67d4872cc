#include "hmac_sha256.h"

#include <string.h>

#include "sha256.h"

void hmac_sha256(const void *key, size_t key_len, const void *const *data, const size_t *len, size_t n,
                 uint8_t out[SHA256_BYTES])
{
    uint8_t k[64] = {0}, pad[64], inner[SHA256_BYTES];
    if (key_len > sizeof k)
        vgpu_sha256(key, key_len, k); /* a long key is its hash */
    else if (key_len)
        memcpy(k, key, key_len);
    struct vgpu_sha256 s;
    for (int i = 0; i < 64; i++)
        pad[i] = k[i] ^ 0x36;
    vgpu_sha256_init(&s);
    vgpu_sha256_update(&s, pad, sizeof pad);
    for (size_t i = 0; i < n; i++)
        vgpu_sha256_update(&s, data[i], len[i]);
    vgpu_sha256_final(&s, inner);
    for (int i = 0; i < 64; i++)
        pad[i] = k[i] ^ 0x5c;
    vgpu_sha256_init(&s);
    vgpu_sha256_update(&s, pad, sizeof pad);
    vgpu_sha256_update(&s, inner, sizeof inner);
    vgpu_sha256_final(&s, out);
}

int mac_equal(const uint8_t *a, const uint8_t *b, size_t n)
{
    uint8_t diff = 0;
    for (size_t i = 0; i < n; i++)
        diff |= (uint8_t)(a[i] ^ b[i]);
    return diff == 0;
}
