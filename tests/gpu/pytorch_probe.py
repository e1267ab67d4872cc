"""How far PyTorch gets on this CUDA driver: each step prints `STEP name: ok` or `STEP name: FAILED
(reason)` and the probe goes on to the next, so one run shows everything that breaks. Run natively
and under vgpu-run by tests/gpu/run.sh; not a pass/fail test."""
from probe_step import step


state = {}


def do_import():
    import torch
    state["torch"] = torch
    return "torch %s, CUDA %s" % (torch.__version__, torch.version.cuda)


def do_available():
    torch = state["torch"]
    if not torch.cuda.is_available():
        raise RuntimeError("torch.cuda.is_available() is False")
    return "%d device(s), %s" % (torch.cuda.device_count(), torch.cuda.get_device_name(0))


def do_create():
    torch = state["torch"]
    x = torch.arange(1 << 20, device="cuda", dtype=torch.float32)
    state["x"] = x
    got = x[-1].item()
    if got != (1 << 20) - 1:
        raise RuntimeError("x[-1] = %r" % got)


def do_elementwise():
    torch = state["torch"]
    y = state["x"] * 2 + 1
    total = y.double().sum().item()
    n = 1 << 20
    want = float(n * (n - 1) + n)
    if total != want:
        raise RuntimeError("sum %r, want %r" % (total, want))
    torch.cuda.synchronize()


def do_matmul():
    torch = state["torch"]
    g = torch.Generator().manual_seed(1)
    a = torch.randn(512, 384, generator=g)
    b = torch.randn(384, 256, generator=g)
    c = (a.cuda() @ b.cuda()).cpu()
    err = (c - a @ b).abs().max().item()
    if err > 1e-2:
        raise RuntimeError("max error %g" % err)
    return "max error %.2g" % err


def do_matmul_half():
    torch = state["torch"]
    a = torch.randn(1024, 1024, device="cuda", dtype=torch.float16)
    c = a @ a
    torch.cuda.synchronize()
    return "%s" % (tuple(c.shape),)


def do_conv():
    torch = state["torch"]
    x = torch.randn(8, 3, 32, 32, device="cuda")
    w = torch.randn(16, 3, 3, 3, device="cuda")
    y = torch.nn.functional.conv2d(x, w)
    ref = torch.nn.functional.conv2d(x.cpu(), w.cpu())
    err = (y.cpu() - ref).abs().max().item()
    if err > 1e-3:
        raise RuntimeError("max error %g" % err)
    return "max error %.2g" % err


def do_train_step():
    torch = state["torch"]
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(256, 64, device="cuda")
    t = torch.randint(0, 10, (256,), device="cuda")
    first = None
    for _ in range(20):
        loss = torch.nn.functional.cross_entropy(model(x), t)
        opt.zero_grad()
        loss.backward()
        opt.step()
        first = first if first is not None else loss.item()
    last = loss.item()
    if not last < first:
        raise RuntimeError("loss did not fall: %g -> %g" % (first, last))
    return "loss %.3f -> %.3f" % (first, last)


def do_cuda_graph():
    torch = state["torch"]
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)).cuda()
    static_x = torch.randn(32, 64, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up on a side stream, as PyTorch asks before a capture
        for _ in range(3):
            model(static_x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_y = model(static_x)
    errs = []
    for _ in range(3):
        static_x.copy_(torch.randn(32, 64, device="cuda"))
        graph.replay()
        errs.append((static_y - model(static_x)).abs().max().item())
    if max(errs) > 1e-4:
        raise RuntimeError("replays differ from eager runs by %g" % max(errs))
    return "3 replays, max difference %.2g" % max(errs)


def do_compile(mode):
    def run():
        torch = state["torch"]

        def f(x, y):
            return torch.sin(x) * torch.cos(y) + x @ y

        x = torch.randn(256, 256, device="cuda")
        y = torch.randn(256, 256, device="cuda")
        want = f(x, y)
        g = torch.compile(f) if mode == "default" else torch.compile(f, mode=mode)
        for _ in range(4):  # reduce-overhead records a CUDA graph on a later call and replays it
            got = g(x, y)
        torch.cuda.synchronize()
        err = (got - want).abs().max().item()
        if err > 1e-3:
            raise RuntimeError("compiled result differs by %g" % err)
        return "max difference %.2g" % err
    return run


def do_nvml():
    import ctypes
    torch = state["torch"]
    nvml = ctypes.CDLL("libnvidia-ml.so.1")
    if nvml.nvmlInit_v2() != 0:
        raise RuntimeError("nvmlInit_v2 failed")
    count = ctypes.c_uint(0)
    nvml.nvmlDeviceGetCount_v2(ctypes.byref(count))
    nvml.nvmlShutdown()
    if count.value != torch.cuda.device_count():
        raise RuntimeError("NVML counts %d devices, CUDA %d" % (count.value, torch.cuda.device_count()))
    return "%d device(s), as CUDA" % count.value


def do_two_devices():
    """Tensors moved between cuda:0 and cuda:1 (contiguous, and a strided view, which PyTorch copies
    with a kernel where the devices have peer access), and a computation on each."""
    torch = state["torch"]
    if torch.cuda.device_count() < 2:
        return "one device"
    g = torch.Generator().manual_seed(2)
    a = torch.randn(1024, 1024, generator=g)
    x0 = a.to("cuda:0")
    x1 = x0.to("cuda:1") * 2
    back = x1.to("cuda:0") + x0
    t1 = x0.t().to("cuda:1")
    if not torch.equal(back.cpu(), a * 3) or not torch.equal(t1.cpu(), a.t()):
        raise RuntimeError("the tensors changed on their way")
    return "peer access %s" % torch.cuda.can_device_access_peer(0, 1)


def do_green_context():
    """A matmul on a green context of 16 SMs (torch.cuda.green_contexts, on the driver's green
    contexts), equal to the one on the whole device."""
    torch = state["torch"]
    from torch.cuda.green_contexts import GreenContext
    g = torch.Generator().manual_seed(3)
    x = torch.randn(1024, 1024, generator=g).to("cuda")
    ref = x @ x
    green = GreenContext.create(16, 0)
    green.set_context()
    y = x @ x
    torch.cuda.synchronize()
    green.pop_context()
    if not torch.allclose(y, ref, rtol=1e-4, atol=1e-3):
        raise RuntimeError("the green context's matmul differs")
    return "matmul on 16 SMs as on the device"


ok = step("import", do_import)
ok = ok and step("cuda available", do_available)
if ok:
    step("tensor creation", do_create) and step("elementwise", do_elementwise)
    step("matmul fp32 (cuBLAS)", do_matmul)
    step("matmul fp16 (cuBLASLt)", do_matmul_half)
    step("conv2d (cuDNN)", do_conv)
    step("training step", do_train_step)
    step("CUDA graph capture and replay", do_cuda_graph)
    step("torch.compile", do_compile("default"))
    step("torch.compile, mode reduce-overhead", do_compile("reduce-overhead"))
    step("NVML device count", do_nvml)
    step("two devices", do_two_devices)
    step("green context", do_green_context)
