/* Stream memory operations: writes of 32 and 64 bits land, a wait holds its stream until another
 * stream's write satisfies it (and the host's store into mapped pinned memory satisfies another),
 * the wait conditions (cyclic greater-or-equal, equal, and, nor), a batch of operations with a
 * barrier, and what bad arguments answer (printed, for check-gpu to compare with the driver's).
 * Needs no kernel. */
#include <string.h>
#include <unistd.h>

#include "progutil.h"

static uint32_t read32(CUdeviceptr p)
{
    uint32_t v;
    CHECK(cuMemcpyDtoH(&v, p, sizeof v));
    return v;
}

int main(void)
{
    CUdevice dev;
    prog_init(&dev);
    int wide = 0, nor = 0;
    CHECK(cuDeviceGetAttribute(&wide, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, dev));
    CHECK(cuDeviceGetAttribute(&nor, CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR, dev));
    EXPECT(wide && nor, "64-bit operations %d, nor waits %d", wide, nor);
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, 64));
    CHECK(cuMemsetD8(d, 0, 64));
    CHECK(cuCtxSynchronize()); /* the memset may still run; the streams below do not wait for it */
    CUstream a, b;
    CHECK(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING));
    CHECK(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING));

    /* Writes. */
    CHECK(cuStreamWriteValue32(a, d, 7, 0));
    CHECK(cuStreamWriteValue64(a, d + 8, 0x1122334455667788ull, 0));
    CHECK(cuStreamSynchronize(a));
    uint64_t v64 = 0;
    CHECK(cuMemcpyDtoH(&v64, d + 8, 8));
    EXPECT(read32(d) == 7 && v64 == 0x1122334455667788ull, "wrote %u and %llx", read32(d), (unsigned long long)v64);

    /* A wait holds its stream until another stream satisfies it. */
    CHECK(cuStreamWaitValue32(a, d, 10, CU_STREAM_WAIT_VALUE_GEQ));
    CHECK(cuStreamWriteValue32(a, d + 4, 99, 0));
    usleep(20000);
    EXPECT_RESULT(cuStreamQuery(a), CUDA_ERROR_NOT_READY);
    EXPECT(read32(d + 4) == 0, "the write after an unsatisfied wait already ran");
    CHECK(cuStreamWriteValue32(b, d, 12, 0));
    CHECK(cuStreamSynchronize(a));
    EXPECT(read32(d + 4) == 99, "the write after the wait did not run (%u)", read32(d + 4));

    /* The host satisfies a wait on mapped pinned memory. */
    uint32_t *flag;
    CHECK(cuMemHostAlloc((void **)&flag, 4096, CU_MEMHOSTALLOC_DEVICEMAP));
    *flag = 0;
    CUdeviceptr dflag;
    CHECK(cuMemHostGetDevicePointer(&dflag, flag, 0));
    CHECK(cuStreamWaitValue32(a, dflag, 5, CU_STREAM_WAIT_VALUE_EQ));
    CHECK(cuStreamWriteValue32(a, d + 16, 1234, 0));
    usleep(20000);
    EXPECT_RESULT(cuStreamQuery(a), CUDA_ERROR_NOT_READY);
    __atomic_store_n(flag, 5, __ATOMIC_RELEASE);
    CHECK(cuStreamSynchronize(a));
    EXPECT(read32(d + 16) == 1234, "the write after the host's signal did not run");

    /* The other conditions, each satisfied by what is there (d holds 12 = 0b1100). */
    CHECK(cuStreamWaitValue32(a, d, 4, CU_STREAM_WAIT_VALUE_AND));
    CHECK(cuStreamWaitValue32(a, d, 3, CU_STREAM_WAIT_VALUE_NOR));
    CHECK(cuStreamWaitValue32(a, d, 0xfffffff0u, CU_STREAM_WAIT_VALUE_GEQ)); /* 12 - (-16) >= 0, cyclically */
    CHECK(cuStreamWaitValue64(a, d + 8, 0x1122334455667788ull, CU_STREAM_WAIT_VALUE_EQ));
    CHECK(cuStreamSynchronize(a));

    /* A batch. */
    CUstreamBatchMemOpParams ops[3];
    memset(ops, 0, sizeof ops);
    ops[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
    ops[0].writeValue.address = d + 32;
    ops[0].writeValue.value = 0xabcdu;
    ops[1].memoryBarrier.operation = CU_STREAM_MEM_OP_BARRIER;
    ops[1].memoryBarrier.flags = CU_STREAM_MEMORY_BARRIER_TYPE_GPU;
    ops[2].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
    ops[2].writeValue.address = d + 40;
    ops[2].writeValue.value64 = 0xfeedull << 32;
    CHECK(cuStreamBatchMemOp(b, 3, ops, 0));
    CHECK(cuStreamSynchronize(b));
    CHECK(cuMemcpyDtoH(&v64, d + 40, 8));
    EXPECT(read32(d + 32) == 0xabcdu && v64 == 0xfeedull << 32, "batch wrote %x and %llx", read32(d + 32),
           (unsigned long long)v64);

    /* Bad arguments: printed, not asserted, so that check-gpu compares them with the driver. */
    printf("32-bit write without a memory barrier: %d\n",
           (int)cuStreamWriteValue32(a, d + 48, 1, CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER));
    printf("64-bit write without a memory barrier: %d\n",
           (int)cuStreamWriteValue64(a, d + 48, 1, CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER));
    printf("wait with a flush: %d\n", (int)cuStreamWaitValue32(a, d, 0, CU_STREAM_WAIT_VALUE_GEQ | CU_STREAM_WAIT_VALUE_FLUSH));
    printf("write to memory that is not the device's: %d\n", (int)cuStreamWriteValue32(a, 0x1000, 1, 0));
    printf("misaligned 32-bit write: %d\n", (int)cuStreamWriteValue32(a, d + 2, 1, 0));
    printf("misaligned 64-bit write: %d\n", (int)cuStreamWriteValue64(a, d + 4, 1, 0));
    printf("unknown write flags: %d\n", (int)cuStreamWriteValue32(a, d, 1, 0x80));
    printf("unknown wait condition flags: %d\n", (int)cuStreamWaitValue32(a, d, 1, 0x10));
    printf("empty batch: %d\n", (int)cuStreamBatchMemOp(a, 0, ops, 0));
    printf("batch flags: %d\n", (int)cuStreamBatchMemOp(a, 1, ops, 1));
    CHECK(cuStreamSynchronize(a));
    CHECK(cuStreamSynchronize(b));

    CHECK(cuMemFreeHost(flag));
    CHECK(cuStreamDestroy(a));
    CHECK(cuStreamDestroy(b));
    CHECK(cuMemFree(d));
    printf("memops: writes, waits on device and mapped host memory, every condition, a batch, ok\n");
    return 0;
}
