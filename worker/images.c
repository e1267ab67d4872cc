/* Module images through vgpud's cache: a worker offers the images it loaded (as memfds sealed
 * against every change, so that vgpud can map them safely) and asks for one by its SHA-256 when a
 * client names an image by hash. vgpud computes every hash itself. */
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "log.h"
#include "sealed.h"
#include "worker.h"

int worker_image_get(const uint8_t hash[32], struct vchannel_image *img)
{
    struct vgpu_wmsg_ImageGet q;
    vgpu_wmsg_init(&q.hdr, VGPU_WMSG_ImageGet, sizeof q);
    memcpy(q.hash, hash, 32);
    struct vgpu_wmsg_Image a;
    int fd;
    if (worker_ask(&q, sizeof q, NULL, 0, &a, sizeof a, &fd) != 0)
        return -1;
    void *bytes = MAP_FAILED;
    if (fd >= 0 && a.status == 0 && a.size > 0 && a.size <= SIZE_MAX && vgpu_memfd_is_sealed(fd, (size_t)a.size, true))
        bytes = mmap(NULL, (size_t)a.size, PROT_READ, MAP_SHARED, fd, 0);
    if (fd >= 0)
        close(fd);
    if (bytes == MAP_FAILED)
        return -1;
    *img = (struct vchannel_image){.bytes = bytes, .size = (size_t)a.size};
    return 0;
}

void worker_image_release(struct vchannel_image *img)
{
    if (img->bytes)
        munmap((void *)img->bytes, img->size);
    img->bytes = NULL;
}

void worker_image_offer(const void *bytes, size_t size)
{
    int fd = vgpu_memfd_of("vgpu-image", bytes, size, true);
    if (fd < 0)
        return;
    struct vgpu_wmsg_ImagePut m;
    vgpu_wmsg_init(&m.hdr, VGPU_WMSG_ImagePut, sizeof m);
    m.size = size;
    if (worker_send(&m, sizeof m, &fd, 1) != 0)
        LOG_DEBUG("could not offer an image of %zu bytes to vgpud", size);
    close(fd);
}
