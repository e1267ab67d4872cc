/* The one logger of the project: vgpud, the tools and the frontend all log through it.
 * A line is written with a single write(2), so lines from threads and processes do not interleave. */
#ifndef VGPU_LOG_H
#define VGPU_LOG_H

#include <stdbool.h>

enum vgpu_log_level {
    VGPU_LOG_ERROR = 0,
    VGPU_LOG_WARN = 1,
    VGPU_LOG_INFO = 2,
    VGPU_LOG_DEBUG = 3,
    VGPU_LOG_TRACE = 4
};

/* ident prefixes every line; to_syslog sends lines to syslog(3) instead of stderr. */
void vgpu_log_init(const char *ident, int level, bool to_syslog);
/* "error", "warn", "info", "debug", "trace" or a digit; -1 if unknown. */
int vgpu_log_level_parse(const char *s);
void vgpu_log_set_level(int level);
int vgpu_log_get_level(void);

void vgpu_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A point on a call's way through the processes (tenant, workers, vgpuds), at trace level: the
 * line carries the monotonic clock, the same in every process of a host, so that the lines of all
 * of them can be put in one order (benchmarks/timeline.sh). */
void vgpu_log_timeline(const char *point, unsigned long long value);

#define vgpu_log_enabled(lvl) ((lvl) <= vgpu_log_get_level())
#define LOG_TIMELINE(point, value)                                                                     \
    do {                                                                                               \
        if (vgpu_log_enabled(VGPU_LOG_TRACE))                                                          \
            vgpu_log_timeline((point), (unsigned long long)(value));                                   \
    } while (0)
#define LOG_ERROR(...) vgpu_log(VGPU_LOG_ERROR, __VA_ARGS__)
#define LOG_WARN(...) vgpu_log(VGPU_LOG_WARN, __VA_ARGS__)
#define LOG_INFO(...) vgpu_log(VGPU_LOG_INFO, __VA_ARGS__)
#define LOG_DEBUG(...)                                                                                 \
    do {                                                                                               \
        if (vgpu_log_enabled(VGPU_LOG_DEBUG))                                                          \
            vgpu_log(VGPU_LOG_DEBUG, __VA_ARGS__);                                                     \
    } while (0)
#define LOG_TRACE(...)                                                                                 \
    do {                                                                                               \
        if (vgpu_log_enabled(VGPU_LOG_TRACE))                                                          \
            vgpu_log(VGPU_LOG_TRACE, __VA_ARGS__);                                                     \
    } while (0)

#endif
