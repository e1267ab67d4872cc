"""Two vGPUs of an assembly in one PyTorch process (under tests/gpu/run.sh: cuda:0 a vGPU of this
node, cuda:1 one of another node): tensors made on each, moved between them both ways, computed on
each, checked against the CPU. Prints `assembly: ok (...)` and exits 0, or what differs and 1."""
import sys

import torch


def main():
    n = torch.cuda.device_count()
    if n < 2:
        print("assembly: %d device(s), wanted 2" % n)
        return 1
    torch.manual_seed(0)
    a, b = torch.randn(512, 512), torch.randn(512, 512)
    ref = a @ b
    x0, y1 = a.to("cuda:0"), b.to("cuda:1")
    products = {"cuda:0": x0 @ y1.to("cuda:0"), "cuda:1": x0.to("cuda:1") @ y1}
    for dev, z in products.items():
        if z.device != torch.device(dev) or not torch.allclose(z.cpu(), ref, rtol=1e-4, atol=1e-3):
            print("assembly: the product on %s differs from the CPU's" % dev)
            return 1
    big = torch.arange(1 << 22, dtype=torch.float32, device="cuda:0")  # 16 MiB each way
    back = big.to("cuda:1").mul_(2).to("cuda:0")
    if not torch.equal(back, big * 2):
        print("assembly: 16 MiB to cuda:1 and back came back wrong")
        return 1
    with torch.cuda.device(1):
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            c = (torch.ones(1 << 20, device="cuda:1") * 3).sum()
        s.synchronize()
    if c.item() != 3 * (1 << 20):
        print("assembly: a sum on a stream of cuda:1 gave %r" % c.item())
        return 1
    print("assembly: ok (2 devices: %s; %s)" % (torch.cuda.get_device_name(0), torch.cuda.get_device_name(1)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
