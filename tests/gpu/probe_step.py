"""One step of a framework probe (pytorch_probe.py, cupy_probe.py, jax_probe.py): it prints `STEP name:
ok` or `STEP name: FAILED (reason)` (the traceback to stderr) and the probe goes on to the next."""
import sys
import traceback


def step(name, fn):
    try:
        detail = fn()
        print("STEP %s: ok%s" % (name, " (%s)" % detail if detail else ""), flush=True)
        return True
    except BaseException as e:  # noqa: B902 - the probe reports whatever breaks, then goes on
        print("STEP %s: FAILED (%s: %s)" % (name, type(e).__name__, str(e).splitlines()[0] if str(e) else ""),
              flush=True)
        traceback.print_exc(file=sys.stderr)
        return False
