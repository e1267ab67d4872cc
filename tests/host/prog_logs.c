/* The driver's error log (cuLogs*): a failing call made through cuGetProcAddress (as the CUDA
 * runtime makes every call) or directly reaches the registered callbacks and the log, which dumps from an
 * iterator into memory (with the warning when the buffer holds only the newest messages) and into a
 * file; what the calls answer is printed, for check-gpu to compare with NVIDIA's driver. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "progutil.h"

static int heard;
static char last[512];

static void listen(void *data, CUlogLevel level, char *message, size_t length)
{
    EXPECT(data == &heard && level == CU_LOG_LEVEL_ERROR, "callback data %p, level %d", data, (int)level);
    heard++;
    snprintf(last, sizeof last, "%.*s", (int)length, message);
}

int main(void)
{
    prog_init(NULL);
    CUlogsCallbackHandle h = NULL;
    CHECK(cuLogsRegisterCallback(listen, &heard, &h));
    EXPECT(h != NULL, "no handle for the callback");
    prog_say("cuLogsRegisterCallback(NULL)", cuLogsRegisterCallback(NULL, NULL, &h));
    EXPECT(heard > 0, "the log's own refusal reached no callback");
    prog_say("cuLogsCurrent(NULL)", cuLogsCurrent(NULL, 0));
    CUlogIterator before;
    CHECK(cuLogsCurrent(&before, 0));

    /* cuMemAlloc through the entry-point table, as the runtime calls it. */
    CUresult (*mem_alloc)(CUdeviceptr *, size_t) = NULL;
    CUdriverProcAddressQueryResult status;
    CHECK(cuGetProcAddress_v2("cuMemAlloc", (void **)&mem_alloc, 12000, 0, &status));
    CUdeviceptr d;
    heard = 0;
    EXPECT_RESULT(mem_alloc(&d, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT(heard > 0 && strstr(last, "Returning 1 (CUDA_ERROR_INVALID_VALUE) from cuMemAlloc"),
           "the callback heard %d message(s), the last \"%s\"", heard, last);
    /* The same called directly, as a driver API program calls it. */
    heard = 0;
    last[0] = 0;
    EXPECT_RESULT(cuMemAlloc(&d, 0), CUDA_ERROR_INVALID_VALUE);
    /* (NVIDIA's driver notes two messages here, the last this one.) */
    EXPECT(heard > 0 && strstr(last, "Returning 1 (CUDA_ERROR_INVALID_VALUE) from cuMemAlloc"),
           "a direct call: the callback heard %d message(s), the last \"%s\"", heard, last);
    CUlogIterator after;
    CHECK(cuLogsCurrent(&after, 0));
    EXPECT(after > before, "the iterator stayed at %u", (unsigned)after);

    /* Dumps: everything since the iterator; the newest only into a small buffer; nothing into none. */
    char buf[8192];
    size_t size = sizeof buf;
    CUlogIterator it = before;
    CHECK(cuLogsDumpToMemory(&it, buf, &size, 0));
    EXPECT(strstr(buf, "][CUDA][E] Returning 1 (CUDA_ERROR_INVALID_VALUE) from cuMemAlloc") && it == after,
           "the dump (iterator %u) is \"%s\"", (unsigned)it, buf);
    for (int i = 0; i < 40; i++)
        EXPECT_RESULT(mem_alloc(&d, 0), CUDA_ERROR_INVALID_VALUE);
    size = 400;
    it = before;
    CHECK(cuLogsDumpToMemory(&it, buf, &size, 0));
    EXPECT(!strncmp(buf, "The provided buffer is not large enough", 39), "a small buffer's dump is \"%s\"", buf);
    size = 10;
    it = before;
    prog_say("cuLogsDumpToMemory(10 bytes)", cuLogsDumpToMemory(&it, buf, &size, 0));
    prog_say("cuLogsDumpToMemory(no buffer)", cuLogsDumpToMemory(&it, NULL, &size, 0));
    prog_say("cuLogsDumpToMemory(no size)", cuLogsDumpToMemory(&it, buf, NULL, 0));
    char path[] = "/tmp/prog_logs.XXXXXX";
    int fd = mkstemp(path);
    EXPECT(fd >= 0, "no temporary file");
    close(fd);
    it = before;
    CHECK(cuLogsDumpToFile(&it, path, 0));
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    buf[n] = '\0';
    if (f)
        fclose(f);
    unlink(path);
    EXPECT(strstr(buf, "from cuMemAlloc"), "the file holds \"%s\"", buf);
    prog_say("cuLogsDumpToFile(no path)", cuLogsDumpToFile(&it, NULL, 0));

    CHECK(cuLogsUnregisterCallback(h));
    heard = 0;
    EXPECT_RESULT(mem_alloc(&d, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT(heard == 0, "an unregistered callback heard %d message(s)", heard);
    printf("logs: callbacks, iterators, dumps to memory and to a file: ok\n");
    return 0;
}
