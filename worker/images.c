/* Module images through vgpud's cache: a worker offers the images it loaded (as memfds sealed
 * against every change, so that vgpud can map them safely) and asks for one by its SHA-256 when a
 * client names an image by hash. vgpud computes every hash itself. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "sealed.h"
#include "worker.h"

/* How long a poller waits for vgpud's answer before it lets the client send the image itself. */
#define ANSWER_TIMEOUT_S 5
#define MAX_REQUESTS 32

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint32_t next;
    bool abandoned;
    struct {
        uint32_t id; /* 0: free */
        bool answered;
        int32_t status;
        int fd;
        uint64_t size;
    } req[MAX_REQUESTS];
} im = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

int worker_image_get(const uint8_t hash[32], struct vchannel_image *img)
{
    pthread_mutex_lock(&im.mu);
    int k = -1;
    for (int i = 0; i < MAX_REQUESTS && k < 0; i++)
        if (im.req[i].id == 0)
            k = i;
    if (k < 0 || im.abandoned) {
        pthread_mutex_unlock(&im.mu);
        return -1;
    }
    uint32_t id = ++im.next ? im.next : ++im.next;
    im.req[k].id = id;
    im.req[k].answered = false;
    im.req[k].fd = -1;
    pthread_mutex_unlock(&im.mu);

    struct vgpu_wmsg_ImageGet q;
    vgpu_wmsg_init(&q.hdr, VGPU_WMSG_ImageGet, sizeof q);
    q.request = id;
    memcpy(q.hash, hash, 32);
    int e = worker_send(&q, sizeof q, NULL, 0);

    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += ANSWER_TIMEOUT_S;
    pthread_mutex_lock(&im.mu);
    while (e == 0 && !im.req[k].answered && !im.abandoned)
        e = pthread_cond_timedwait(&im.cv, &im.mu, &until);
    int fd = im.req[k].answered ? im.req[k].fd : -1;
    int32_t status = im.req[k].status;
    uint64_t size = im.req[k].size;
    im.req[k].id = 0;
    pthread_mutex_unlock(&im.mu);

    void *bytes = MAP_FAILED;
    if (fd >= 0 && status == 0 && size > 0 && size <= SIZE_MAX && vgpu_memfd_is_sealed(fd, (size_t)size, true))
        bytes = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0);
    if (fd >= 0)
        close(fd);
    if (bytes == MAP_FAILED)
        return -1;
    *img = (struct vchannel_image){.bytes = bytes, .size = (size_t)size};
    return 0;
}

void worker_image_release(struct vchannel_image *img)
{
    if (img->bytes)
        munmap((void *)img->bytes, img->size);
    img->bytes = NULL;
}

void worker_image_answer(const struct vgpu_wmsg_Image *m, int fd)
{
    pthread_mutex_lock(&im.mu);
    for (int i = 0; i < MAX_REQUESTS; i++)
        if (im.req[i].id == m->request && m->request && !im.req[i].answered) {
            im.req[i].answered = true;
            im.req[i].status = m->status;
            im.req[i].size = m->size;
            im.req[i].fd = fd;
            fd = -1;
            pthread_cond_broadcast(&im.cv);
            break;
        }
    pthread_mutex_unlock(&im.mu);
    if (fd >= 0) /* an answer nobody waits for any more */
        close(fd);
}

void worker_images_abandon(void)
{
    pthread_mutex_lock(&im.mu);
    im.abandoned = true;
    pthread_cond_broadcast(&im.cv);
    pthread_mutex_unlock(&im.mu);
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
