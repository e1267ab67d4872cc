"""A vGPU's memory quota as PyTorch sees it (argument: the quota in MiB): torch.cuda.mem_get_info
and the device's properties give the quota as the total, tensors fit up to it, the next one raises
torch.cuda.OutOfMemoryError, and what is freed fits again."""
import sys

import torch

MiB = 1 << 20
quota = int(sys.argv[1]) * MiB
free, total = torch.cuda.mem_get_info()
assert total == quota, f"mem_get_info total {total}, quota {quota}"
props = torch.cuda.get_device_properties(0)
assert props.total_memory == quota, f"total_memory {props.total_memory}"
print(f"mem_get_info: total {total // MiB} MiB, free {free // MiB} MiB (at most the total: {free <= total})")

big = torch.empty(quota * 3 // 4, dtype=torch.uint8, device="cuda")
big.fill_(7)
try:
    more = torch.empty(quota // 2, dtype=torch.uint8, device="cuda")
    raise SystemExit("a tensor beyond the quota was allocated")
except torch.cuda.OutOfMemoryError:
    print("beyond the quota: torch.cuda.OutOfMemoryError")
free_full, _ = torch.cuda.mem_get_info()
assert free_full < quota // 4 + MiB, f"free with 3/4 allocated: {free_full}"
assert int(big[-1].item()) == 7
del big
torch.cuda.empty_cache()
again = torch.ones(quota // 2, dtype=torch.uint8, device="cuda")
assert int(again[0].item()) == 1 and int(again[-1].item()) == 1
print("after freeing, half the quota fits again")
print("quota: ok")
