// NCCL's status checked as the apps check CUDA's (header-only, for the NCCL programs).
#pragma once

#include <nccl.h>

#include "apps.h"

#define NCCL_CHECK(call)                                                                           \
    do {                                                                                           \
        ncclResult_t r_ = (call);                                                                  \
        if (r_ != ncclSuccess) apps::fail("%s: %s", #call, ncclGetErrorString(r_));               \
    } while (0)
