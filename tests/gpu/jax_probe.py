"""JAX on this CUDA driver: its devices, jit, grad and a small training loop (linear regression by
gradient descent), each checked against NumPy. Each step prints `STEP name: ok` or `STEP name:
FAILED (reason)`; run natively and under vgpu-run by tests/gpu/run.sh, which wants every step that
passes natively to pass through a vGPU. XLA's autotuning is off (XLA_FLAGS, unless set): through a
vGPU its profiling runs fail (not yet understood), and autotuning only picks among kernels."""
import os

from probe_step import step

os.environ.setdefault("XLA_FLAGS", "--xla_gpu_autotune_level=0")
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


def devices():
    import jax
    d = jax.devices()
    if not d or d[0].platform != "gpu":
        raise RuntimeError("no GPU: %s" % d)
    return "%d GPU(s)" % len(d)


def jit():
    import jax
    import jax.numpy as jnp
    import numpy as np
    x = np.linspace(-1, 1, 256 * 256, dtype=np.float32).reshape(256, 256)
    got = np.asarray(jax.jit(lambda a: jnp.sin(a) * 2 + a @ a.T)(x))
    err = float(np.abs(got - (np.sin(x) * 2 + x @ x.T)).max())
    if err > 1e-2:
        raise RuntimeError("jit differs from NumPy by %g" % err)
    return "max difference %.2g" % err


def grad():
    import jax
    import jax.numpy as jnp
    import numpy as np
    x = np.linspace(-1, 1, 64 * 8, dtype=np.float32).reshape(64, 8)
    w = np.full((8, 1), 0.5, dtype=np.float32)
    got = np.asarray(jax.grad(lambda v: jnp.sum((x @ v - 1.0) ** 2))(w))
    want = 2 * x.T @ (x @ w - 1.0)
    err = float(np.abs(got - want).max())
    if err > 1e-3:
        raise RuntimeError("grad differs from NumPy by %g" % err)
    return "max difference %.2g" % err


def train():
    import jax
    import jax.numpy as jnp
    import numpy as np
    rng = np.random.default_rng(0)
    x = rng.standard_normal((512, 16)).astype(np.float32)
    true_w = rng.standard_normal((16, 1)).astype(np.float32)
    y = x @ true_w
    loss = lambda w: jnp.mean((x @ w - y) ** 2)  # noqa: E731
    update = jax.jit(lambda w: w - 0.1 * jax.grad(loss)(w))
    w = jnp.zeros((16, 1))
    for _ in range(200):
        w = update(w)
    final = float(loss(w))
    if not final < 1e-4:
        raise RuntimeError("the loss after 200 steps is %g" % final)
    return "loss %.2g after 200 steps" % final


for name, fn in [("devices", devices), ("jit", jit), ("grad", grad), ("train", train)]:
    step(name, fn)
