"""Swapping as PyTorch sees it: run several at once through vGPUs whose device memory, together,
is less than they hold. Each holds MiB of int32 tensors in 64 MiB pieces with a pattern of its own,
adds to every piece in rounds with pauses between them (the others' turns), and at the end every
element must be its pattern plus the rounds. Prints one line; exits non-zero on a wrong element.

    python swap_probe.py MiB ROUNDS
"""
import os
import sys
import time

import torch


def main():
    mib, rounds = int(sys.argv[1]), int(sys.argv[2])
    piece = 64 << 20
    n = piece // 4
    seed = os.getpid() % 1000
    dev = torch.device("cuda")
    pieces = []
    for i in range(mib * (1 << 20) // piece):
        t = torch.arange(n, dtype=torch.int32, device=dev)
        t.mul_(i + 1).add_(seed)
        pieces.append(t)
    torch.cuda.synchronize()
    for _ in range(rounds):
        for t in pieces:
            t.add_(1)
        torch.cuda.synchronize()
        time.sleep(0.05)
    for i, t in enumerate(pieces):
        want = torch.arange(n, dtype=torch.int32, device=dev).mul_(i + 1).add_(seed + rounds)
        if not torch.equal(t, want):
            bad = (t != want).nonzero()[0].item()
            print(f"piece {i} element {bad}: {t[bad].item()}, not {want[bad].item()}")
            return 1
        del want
    print(f"swap-pytorch: {len(pieces) * 64} MiB in {len(pieces)} tensors, {rounds} rounds, data intact")
    return 0


if __name__ == "__main__":
    sys.exit(main())
