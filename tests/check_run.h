/* Every Check test program ends the same way: run its suite, and fail if any test did. */
#ifndef VGPU_CHECK_RUN_H
#define VGPU_CHECK_RUN_H

#include <check.h>
#include <stdlib.h>

static inline int vgpu_check_run(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

#endif
