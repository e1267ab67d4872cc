"""PyTorch with the allocator that PYTORCH_CUDA_ALLOC_CONF names (expandable segments: its allocator
on the VMM API; backend:cudaMallocAsync: the driver's stream-ordered pools): tensors of several
sizes, a matmul checked against the CPU, a tensor used on a side stream, freed and allocated again.
Run natively and through a vGPU by tests/gpu/run.sh, which wants the same output."""
import os

import torch

conf = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
xs = [torch.randn(n, device="cuda") for n in (1 << 10, 1 << 20, 3 << 20, 50 << 20)]
a = torch.randn(2048, 2048, device="cuda")
ok = torch.allclose((a @ a).cpu(), a.cpu() @ a.cpu(), rtol=1e-3, atol=1e-2)
side = torch.cuda.Stream()
with torch.cuda.stream(side):
    b = torch.full((1 << 20,), 3.0, device="cuda")
    b.mul_(2)
torch.cuda.current_stream().wait_stream(side)
b.record_stream(torch.cuda.current_stream())
side_sum = int(b.sum().item())
del xs, b
torch.cuda.empty_cache()
ys = [torch.ones(n, device="cuda") for n in (7 << 20, 33 << 20)]
torch.cuda.synchronize()
print(conf or "default allocator", ": backend", torch.cuda.get_allocator_backend(), "matmul", ok,
      "side stream sum", side_sum, "sums", [int(y.sum().item()) for y in ys])
