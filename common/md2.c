#include "md2.h"

#include <string.h>

/* RFC 1319's substitution table, a permutation of 0..255 derived from the digits of pi. */
static const uint8_t pi_subst[256] = {
    41, 46, 67, 201, 162, 216, 124, 1, 61, 54, 84, 161, 236, 240, 6, 19,
    98, 167, 5, 243, 192, 199, 115, 140, 152, 147, 43, 217, 188, 76, 130, 202,
    30, 155, 87, 60, 253, 212, 224, 22, 103, 66, 111, 24, 138, 23, 229, 18,
    190, 78, 196, 214, 218, 158, 222, 73, 160, 251, 245, 142, 187, 47, 238, 122,
    169, 104, 121, 145, 21, 178, 7, 63, 148, 194, 16, 137, 11, 34, 95, 33,
    128, 127, 93, 154, 90, 144, 50, 39, 53, 62, 204, 231, 191, 247, 151, 3,
    255, 25, 48, 179, 72, 165, 181, 209, 215, 94, 146, 42, 172, 86, 170, 198,
    79, 184, 56, 210, 150, 164, 125, 182, 118, 252, 107, 226, 156, 116, 4, 241,
    69, 157, 112, 89, 100, 113, 135, 32, 134, 91, 207, 101, 230, 45, 168, 2,
    27, 96, 37, 173, 174, 176, 185, 246, 28, 70, 97, 105, 52, 64, 126, 15,
    85, 71, 163, 35, 221, 81, 175, 58, 195, 92, 249, 206, 186, 197, 234, 38,
    44, 83, 13, 110, 133, 40, 132, 9, 211, 223, 205, 244, 65, 129, 77, 82,
    106, 220, 55, 200, 108, 193, 171, 250, 36, 225, 123, 8, 12, 189, 177, 74,
    120, 136, 149, 139, 227, 99, 232, 109, 233, 203, 213, 254, 59, 0, 29, 57,
    242, 239, 183, 14, 102, 88, 208, 228, 166, 119, 114, 248, 235, 117, 75, 10,
    49, 68, 80, 180, 143, 237, 31, 26, 219, 153, 141, 51, 159, 17, 131, 20,
};

static void transform(struct vgpu_md2 *m, const uint8_t block[16])
{
    uint8_t *x = m->state;
    for (int j = 0; j < 16; j++) {
        x[16 + j] = block[j];
        x[32 + j] = (uint8_t)(x[16 + j] ^ x[j]);
    }
    uint8_t t = 0;
    for (int round = 0; round < 18; round++) {
        for (int k = 0; k < 48; k++)
            t = x[k] ^= pi_subst[t];
        t = (uint8_t)(t + round);
    }
    uint8_t l = m->checksum[15];
    for (int j = 0; j < 16; j++)
        l = m->checksum[j] ^= pi_subst[block[j] ^ l];
}

void vgpu_md2_init(struct vgpu_md2 *m) { memset(m, 0, sizeof *m); }

void vgpu_md2_update(struct vgpu_md2 *m, const void *data, size_t len)
{
    const uint8_t *p = data;
    while (len) {
        size_t take = 16 - m->buffered < len ? 16 - m->buffered : len;
        memcpy(m->buffer + m->buffered, p, take);
        m->buffered += take;
        p += take;
        len -= take;
        if (m->buffered == 16) {
            transform(m, m->buffer);
            m->buffered = 0;
        }
    }
}

void vgpu_md2_final(struct vgpu_md2 *m, uint8_t digest[16])
{
    uint8_t pad = (uint8_t)(16 - m->buffered);
    uint8_t padding[16];
    memset(padding, pad, sizeof padding);
    vgpu_md2_update(m, padding, pad);
    uint8_t checksum[16];
    memcpy(checksum, m->checksum, sizeof checksum);
    vgpu_md2_update(m, checksum, sizeof checksum);
    memcpy(digest, m->state, 16);
}

void vgpu_md2(const void *data, size_t len, uint8_t digest[16])
{
    struct vgpu_md2 m;
    vgpu_md2_init(&m);
    vgpu_md2_update(&m, data, len);
    vgpu_md2_final(&m, digest);
}

void vgpu_hmac_md2(const uint8_t key[16], const void *data, size_t len, uint8_t digest[16])
{
    uint8_t pad[16], inner[16];
    struct vgpu_md2 m;
    for (int i = 0; i < 16; i++)
        pad[i] = key[i] ^ 0x36;
    vgpu_md2_init(&m);
    vgpu_md2_update(&m, pad, sizeof pad);
    vgpu_md2_update(&m, data, len);
    vgpu_md2_final(&m, inner);
    for (int i = 0; i < 16; i++)
        pad[i] = key[i] ^ 0x5c;
    vgpu_md2_init(&m);
    vgpu_md2_update(&m, pad, sizeof pad);
    vgpu_md2_update(&m, inner, sizeof inner);
    vgpu_md2_final(&m, digest);
}
