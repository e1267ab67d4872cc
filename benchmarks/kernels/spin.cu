// A kernel that keeps the GPU busy for a given number of nanoseconds (by the GPU's global timer),
// so that a benchmark knows exactly how much GPU time each of its launches uses.
extern "C" __global__ void spin(unsigned long long ns)
{
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
}
