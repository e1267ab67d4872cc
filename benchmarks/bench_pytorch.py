"""PyTorch through the driver it finds: a compute-bound fp16 matmul loop, a launch-bound small
training loop and a host<->device copy, each timed with the GPU synchronised. benchmarks/run.sh
runs it natively and through a vGPU. Prints `RESULT name value unit` lines like the C benchmarks."""
import time

import torch


def timed(fn, reps):
    fn()  # warm-up: kernels loaded, cuBLAS heuristics cached
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / reps


def main():
    t0 = time.perf_counter()
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    print("RESULT pytorch_first_tensor %.1f ms" % ((time.perf_counter() - t0) * 1e3))

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
    s = timed(lambda: a @ b, 50)
    print("RESULT pytorch_matmul_fp16_8192 %.1f TFLOP/s" % (2 * 8192 ** 3 / s / 1e12))

    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(64, 256, device="cuda")
    t = torch.randint(0, 10, (64,), device="cuda")

    def step():
        loss = torch.nn.functional.cross_entropy(model(x), t)
        opt.zero_grad()
        loss.backward()
        opt.step()

    s = timed(step, 300)
    print("RESULT pytorch_train_step_small %.1f us" % (s * 1e6))

    host = torch.randn(64 << 20 >> 2).pin_memory()
    dev = torch.empty_like(host, device="cuda")
    s = timed(lambda: dev.copy_(host, non_blocking=True), 20)
    print("RESULT pytorch_h2d_pinned_64MiB %.2f GB/s" % (host.numel() * 4 / s / 1e9))


if __name__ == "__main__":
    main()
