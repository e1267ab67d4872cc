/* Driver API: the driver's error log (cuLogsRegisterCallback, cuLogsUnregisterCallback,
 * cuLogsCurrent, cuLogsDumpToMemory, cuLogsDumpToFile). The frontend keeps the log as the driver
 * does: every error returned to a call made through cuGetProcAddress (every call of the CUDA
 * runtime), every call the vGPU does not offer, and the misuse of the log itself, as "Returning N
 * (NAME) from FUNCTION". Messages are stamped as the driver stamps them
 * ("[HH:MM:SS.mmm][thread][CUDA][E] ..."), handed to the callbacks as they are made, and kept, the
 * last LOG_KEEP of them; an iterator is the number of messages made before it. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "fe.h"

#define LOG_KEEP 1024u
#define LOG_LINE 320u
#define LOG_CALLBACKS 64u

struct CUlogsCallbackEntry_st {
    CUlogsCallback fn;
    void *data;
};

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static char (*lines)[LOG_LINE]; /* LOG_KEEP of them, made at the first message */
static uint32_t made;           /* messages made so far (the next one's iterator) */
static struct CUlogsCallbackEntry_st *callbacks[LOG_CALLBACKS];

static const char too_small[] = "The provided buffer is not large enough to hold all messages. Some messages will be missing\n";

void fe_log_error(const char *fmt, ...)
{
    char msg[LOG_LINE - 64];
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (len < 0)
        return;
    if ((size_t)len >= sizeof msg)
        len = (int)sizeof msg - 1;
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    localtime_r(&tv.tv_sec, &tm);
    struct CUlogsCallbackEntry_st call[LOG_CALLBACKS];
    size_t ncall = 0;
    pthread_mutex_lock(&log_mu);
    if (!lines)
        lines = calloc(LOG_KEEP, LOG_LINE);
    if (lines)
        snprintf(lines[made % LOG_KEEP], LOG_LINE, "[%02d:%02d:%02d.%03d][%lu][CUDA][E] %s\n", tm.tm_hour, tm.tm_min,
                 tm.tm_sec, (int)(tv.tv_usec / 1000), (unsigned long)pthread_self(), msg);
    made++;
    for (size_t i = 0; i < LOG_CALLBACKS; i++)
        if (callbacks[i])
            call[ncall++] = *callbacks[i];
    pthread_mutex_unlock(&log_mu);
    /* Outside the lock: a callback may use the log itself. */
    for (size_t i = 0; i < ncall; i++)
        call[i].fn(call[i].data, CU_LOG_LEVEL_ERROR, msg, (size_t)len);
}

static CUresult refuse(const char *why, const char *function)
{
    fe_log_error("%s", why);
    fe_log_error("Returning 1 (CUDA_ERROR_INVALID_VALUE) from %s", function);
    return CUDA_ERROR_INVALID_VALUE;
}

CUresult cuLogsRegisterCallback(CUlogsCallback callbackFunc, void *userData, CUlogsCallbackHandle *callback_out)
{
    if (!callbackFunc)
        return refuse("callbackFunc cannot be NULL", "cuLogsRegisterCallback");
    struct CUlogsCallbackEntry_st *e = malloc(sizeof *e);
    if (!e)
        return CUDA_ERROR_OUT_OF_MEMORY;
    e->fn = callbackFunc;
    e->data = userData;
    pthread_mutex_lock(&log_mu);
    size_t i = 0;
    while (i < LOG_CALLBACKS && callbacks[i])
        i++;
    if (i < LOG_CALLBACKS)
        callbacks[i] = e;
    pthread_mutex_unlock(&log_mu);
    if (i == LOG_CALLBACKS) {
        free(e);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (callback_out)
        *callback_out = e;
    return CUDA_SUCCESS;
}

CUresult cuLogsUnregisterCallback(CUlogsCallbackHandle callback)
{
    bool found = false;
    pthread_mutex_lock(&log_mu);
    for (size_t i = 0; callback && i < LOG_CALLBACKS && !found; i++)
        if (callbacks[i] == callback) {
            callbacks[i] = NULL;
            found = true;
        }
    pthread_mutex_unlock(&log_mu);
    if (!found)
        return refuse("callback is not registered", "cuLogsUnregisterCallback");
    free(callback);
    return CUDA_SUCCESS;
}

CUresult cuLogsCurrent(CUlogIterator *iterator_out, unsigned int flags)
{
    (void)flags; /* none is defined; the driver takes any */
    if (!iterator_out)
        return refuse("Iterator cannot be NULL", "cuLogsCurrent");
    pthread_mutex_lock(&log_mu);
    *iterator_out = made;
    pthread_mutex_unlock(&log_mu);
    return CUDA_SUCCESS;
}

/* The messages from *iterator on (all that are kept without one), oldest first: the first index. */
static uint32_t first_of(const CUlogIterator *iterator)
{
    uint32_t oldest = made > LOG_KEEP ? made - LOG_KEEP : 0;
    uint32_t from = iterator ? *iterator : 0;
    return from < oldest || from > made ? oldest : from;
}

CUresult cuLogsDumpToMemory(CUlogIterator *iterator, char *buffer, size_t *size, unsigned int flags)
{
    (void)flags;
    if (!buffer)
        return refuse("buffer cannot be NULL", "cuLogsDumpToMemory");
    if (!size)
        return refuse("Memory buffer size must be given for log dump", "cuLogsDumpToMemory");
    pthread_mutex_lock(&log_mu);
    uint32_t first = first_of(iterator), end = made;
    /* The newest messages that fit (with the warning when some do not), then a NUL. */
    size_t room = *size, used = 1;
    uint32_t from = end;
    while (from > first && lines) {
        size_t len = strlen(lines[(from - 1) % LOG_KEEP]);
        size_t warn = from - 1 > first ? sizeof too_small - 1 : 0;
        if (used + len + warn > room)
            break;
        used += len;
        from--;
    }
    if (from < end || first == end) {
        size_t at = 0;
        if (from > first) {
            memcpy(buffer, too_small, sizeof too_small - 1);
            at = sizeof too_small - 1;
        }
        for (uint32_t i = from; i < end; i++) {
            size_t len = strlen(lines[i % LOG_KEEP]);
            memcpy(buffer + at, lines[i % LOG_KEEP], len);
            at += len;
        }
        if (room)
            buffer[at] = '\0';
        *size = at;
        if (iterator)
            *iterator = end;
    }
    bool none = from == end && first != end;
    pthread_mutex_unlock(&log_mu);
    if (none) {
        *size = 0;
        return refuse("Provided buffer is not large enough to write any logs to", "cuLogsDumpToMemory");
    }
    return CUDA_SUCCESS;
}

CUresult cuLogsDumpToFile(CUlogIterator *iterator, const char *pathToFile, unsigned int flags)
{
    (void)flags;
    if (!pathToFile)
        return refuse("pathToFile cannot be NULL", "cuLogsDumpToFile");
    FILE *f = fopen(pathToFile, "w");
    if (!f)
        return refuse("the log file cannot be opened", "cuLogsDumpToFile");
    pthread_mutex_lock(&log_mu);
    uint32_t end = made;
    for (uint32_t i = first_of(iterator); i < end && lines; i++)
        fputs(lines[i % LOG_KEEP], f);
    if (iterator)
        *iterator = end;
    pthread_mutex_unlock(&log_mu);
    return fclose(f) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
