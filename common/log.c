#include "log.h"
#include "bell.h" /* (the monotonic clock, vgpu_now_ns) */

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

static atomic_int log_level = VGPU_LOG_WARN;
static char log_ident[32] = "vgpu";
static bool log_syslog;

static const char *const level_names[] = {"error", "warn", "info", "debug", "trace"};

void vgpu_log_init(const char *ident, int level, bool to_syslog)
{
    if (ident)
        snprintf(log_ident, sizeof log_ident, "%s", ident);
    atomic_store(&log_level, level);
    log_syslog = to_syslog;
    if (to_syslog)
        openlog(log_ident, LOG_PID, LOG_DAEMON);
}

int vgpu_log_level_parse(const char *s)
{
    if (!s || !*s)
        return -1;
    if (s[0] >= '0' && s[0] <= '4' && s[1] == '\0')
        return s[0] - '0';
    for (int i = 0; i < (int)(sizeof level_names / sizeof level_names[0]); i++)
        if (strcasecmp(s, level_names[i]) == 0)
            return i;
    if (strcasecmp(s, "warning") == 0)
        return VGPU_LOG_WARN;
    return -1;
}

void vgpu_log_set_level(int level) { atomic_store(&log_level, level); }

int vgpu_log_get_level(void) { return atomic_load_explicit(&log_level, memory_order_relaxed); }

void vgpu_log_timeline(const char *point, unsigned long long value)
{
    vgpu_log(VGPU_LOG_TRACE, "timeline %lld %s %llu", (long long)vgpu_now_ns(), point, value);
}

void vgpu_log(int level, const char *fmt, ...)
{
    if (level > vgpu_log_get_level())
        return;
    int saved_errno = errno;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (level < 0)
        level = 0;
    if (level > VGPU_LOG_TRACE)
        level = VGPU_LOG_TRACE;
    if (log_syslog) {
        static const int prio[] = {LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG, LOG_DEBUG};
        syslog(prio[level], "%s", msg);
    } else {
        struct timespec ts;
        struct tm tm;
        clock_gettime(CLOCK_REALTIME, &ts);
        localtime_r(&ts.tv_sec, &tm);
        char line[1200];
        int n = snprintf(line, sizeof line, "%02d:%02d:%02d.%06ld %s[%d.%ld] %s: %s\n", tm.tm_hour, tm.tm_min,
                         tm.tm_sec, ts.tv_nsec / 1000, log_ident, (int)getpid(), (long)syscall(SYS_gettid),
                         level_names[level], msg);
        if (n > (int)sizeof line)
            n = (int)sizeof line;
        ssize_t w = write(STDERR_FILENO, line, (size_t)n);
        (void)w;
    }
    errno = saved_errno;
}
