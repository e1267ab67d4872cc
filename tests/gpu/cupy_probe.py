"""CuPy's libraries on this CUDA driver: a raw kernel, cuBLAS, cuFFT, cuSOLVER, cuSPARSE and cuRAND,
each checked against NumPy. Each step prints `STEP name: ok` or `STEP name: FAILED (reason)`; run
natively and under vgpu-run by tests/gpu/run.sh, which wants every step that passes natively to
pass through a vGPU."""
from probe_step import step


def close(got, want, tol, what):
    import numpy as np
    err = float(np.abs(np.asarray(got) - np.asarray(want)).max())
    if err > tol:
        raise RuntimeError("%s differs from NumPy by %g" % (what, err))
    return "max difference %.2g" % err


def raw_kernel():
    import cupy as cp
    k = cp.RawKernel(r'extern "C" __global__ void twice(float *a, int n) {'
                     r' int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) a[i] *= 2; }', "twice")
    a = cp.arange(1000, dtype=cp.float32)
    k((4,), (256,), (a, cp.int32(1000)))
    return close(a.get(), 2 * cp.arange(1000, dtype=cp.float32).get(), 0, "RawKernel")


def blas():
    import cupy as cp
    a = cp.random.default_rng(1).random((128, 96), dtype=cp.float32)
    b = cp.random.default_rng(2).random((96, 64), dtype=cp.float32)
    return close((a @ b).get(), a.get() @ b.get(), 1e-3, "matmul")


def fft():
    import cupy as cp
    import numpy as np
    x = cp.random.default_rng(3).random((64, 48)).astype(cp.complex64)
    close(cp.fft.fft(x[0]).get(), np.fft.fft(x[0].get()), 1e-3, "1D FFT")
    return close(cp.fft.fft2(x).get(), np.fft.fft2(x.get()), 1e-2, "2D FFT")


def solver():
    import cupy as cp
    import numpy as np
    a = cp.random.default_rng(4).random((48, 48)) + 48 * cp.eye(48)
    b = cp.random.default_rng(5).random(48)
    return close(cp.linalg.solve(a, b).get(), np.linalg.solve(a.get(), b.get()), 1e-8, "solve")


def sparse():
    import cupy as cp
    import cupyx.scipy.sparse as sp
    m = sp.random(200, 150, density=0.05, format="csr", dtype=cp.float32, random_state=6)
    v = cp.arange(150, dtype=cp.float32)
    return close((m @ v).get(), m.toarray().get() @ v.get(), 1e-2, "sparse matrix-vector product")


def rand():
    import cupy as cp
    x = cp.random.default_rng(7).standard_normal(1 << 20)
    mean, std = float(x.mean()), float(x.std())
    if abs(mean) > 0.01 or abs(std - 1) > 0.01:
        raise RuntimeError("normal samples with mean %g, deviation %g" % (mean, std))
    return "mean %.3f, deviation %.3f" % (mean, std)


def managed():
    import cupy as cp
    import numpy as np
    mem = cp.cuda.malloc_managed(1 << 22)
    x = cp.ndarray((1 << 20,), dtype=cp.float32, memptr=mem)
    x[:] = cp.arange(1 << 20, dtype=cp.float32)
    cp.cuda.Device().synchronize()
    import ctypes
    host = np.ctypeslib.as_array((ctypes.c_float * (1 << 20)).from_address(mem.ptr))  # the host's view
    close(host, np.arange(1 << 20, dtype=np.float32), 0, "managed memory read by the host")
    host[0] = 5.0
    y = (x * 2).get()
    want = np.arange(1 << 20, dtype=np.float32) * 2
    want[0] = 10.0
    return close(y, want, 0, "managed memory")


if step("import", lambda: __import__("cupy").__version__):
    step("RawKernel", raw_kernel)
    step("cuBLAS", blas)
    step("cuFFT", fft)
    step("cuSOLVER", solver)
    step("cuSPARSE", sparse)
    step("cuRAND", rand)
    step("managed memory", managed)
