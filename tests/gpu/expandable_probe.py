"""PyTorch with expandable segments (its allocator on the VMM API): tensors of several sizes, a matmul
checked against the CPU, freed and allocated again. Run natively and through a vGPU by
tests/gpu/run.sh, which wants the same output."""
import os

os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
import torch  # noqa: E402 - the allocator reads its configuration at import

xs = [torch.randn(n, device="cuda") for n in (1 << 10, 1 << 20, 3 << 20, 50 << 20)]
a = torch.randn(2048, 2048, device="cuda")
ok = torch.allclose((a @ a).cpu(), a.cpu() @ a.cpu(), rtol=1e-3, atol=1e-2)
del xs
torch.cuda.empty_cache()
ys = [torch.ones(n, device="cuda") for n in (7 << 20, 33 << 20)]
print("expandable segments: matmul", ok, "sums", [int(y.sum().item()) for y in ys],
      "reserved MiB", torch.cuda.memory_reserved() >> 20)
