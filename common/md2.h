/* MD2 (RFC 1319) and HMAC over it. The CUDA runtime checks the driver it talks to with an HMAC-MD2
 * integrity answer (see frontend/dark_api.c); MD2 is used for nothing else. */
#ifndef VGPU_MD2_H
#define VGPU_MD2_H

#include <stddef.h>
#include <stdint.h>

struct vgpu_md2 {
    uint8_t state[48];
    uint8_t checksum[16];
    uint8_t buffer[16];
    size_t buffered;
};

void vgpu_md2_init(struct vgpu_md2 *m);
void vgpu_md2_update(struct vgpu_md2 *m, const void *data, size_t len);
void vgpu_md2_final(struct vgpu_md2 *m, uint8_t digest[16]);
void vgpu_md2(const void *data, size_t len, uint8_t digest[16]);

/* HMAC with MD2's 16-byte block; the key is exactly one block. */
void vgpu_hmac_md2(const uint8_t key[16], const void *data, size_t len, uint8_t digest[16]);

#endif
