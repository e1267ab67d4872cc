/* What the host-mode test programs are given by `make check` (tests/tests.mk's TEST_ENV). */
#ifndef VGPU_TESTS_HOST_TEST_ENV_H
#define VGPU_TESTS_HOST_TEST_ENV_H

#include <stdio.h>
#include <stdlib.h>

/* The variable's value; a program started by hand without it says so and ends. */
static inline const char *env_or_die(const char *name)
{
    const char *v = getenv(name);
    if (!v || !*v) {
        fprintf(stderr, "%s is not set (run the tests through `make check`)\n", name);
        exit(2);
    }
    return v;
}

#endif
