/* SHA-256 (FIPS 180-4): vgpud names cached module images by the hash of their contents, so a
 * client can only ever get an image whose bytes hash to the name it asked for. */
#ifndef VGPU_SHA256_H
#define VGPU_SHA256_H

#include <stddef.h>
#include <stdint.h>

struct vgpu_sha256 {
    uint32_t h[8];
    uint64_t length;
    uint8_t buffer[64];
    size_t buffered;
};

void vgpu_sha256_init(struct vgpu_sha256 *s);
void vgpu_sha256_update(struct vgpu_sha256 *s, const void *data, size_t len);
void vgpu_sha256_final(struct vgpu_sha256 *s, uint8_t digest[32]);
void vgpu_sha256(const void *data, size_t len, uint8_t digest[32]);

#endif
