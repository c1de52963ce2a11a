#!/usr/bin/env python3
"""bench/peers.py: the bench's workloads in the peers, one process, one table.

Runs each case of bench/bench.c that a peer can express in NumPy, PyTorch
eager, torch.compile, JAX (jit) and CuPy, whichever are installed, on the
same machine, and prints one table: case, peer, time per call (median of
repeats, min, max). Put it beside build/bench's table from the same run
(bench/run_gpu.sh runs both).

    python3 bench/peers.py              # every case every installed peer can run
    python3 bench/peers.py --quick      # fewer calls and repeats
    python3 bench/peers.py --cpu-only   # NumPy and PyTorch on the CPU
    python3 bench/peers.py --only conv  # cases whose name contains 'conv'
    python3 bench/peers.py --json out.json

Timing: wall clock around a loop of N calls that ends synchronised (the
device's queue drained), after a warm-up of N/10 calls (compilation,
allocator, caches); repeated (7 times, 3 with --quick); median, min and max
per call. float32 products run with TF32 off everywhere (PyTorch, cuDNN,
JAX's default matmul precision set to 'highest'), as the library's do.
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")   # JAX beside PyTorch in one process

ARGS = None
ROWS = []


def peer_modules():
    """The installed peers: name -> module (or None where missing)."""
    mods = {"numpy": np}
    try:
        import torch
        mods["torch"] = torch
    except Exception:
        mods["torch"] = None
    try:
        import jax
        jax.config.update("jax_default_matmul_precision", "highest")
        mods["jax"] = jax
    except Exception:
        mods["jax"] = None
    try:
        import cupy
        cupy.cuda.runtime.getDeviceCount()
        mods["cupy"] = cupy
    except Exception:
        mods["cupy"] = None
    return mods


M = {}


def torch_gpu():
    t = M.get("torch")
    return t is not None and t.cuda.is_available() and not ARGS.cpu_only


def jax_gpu():
    j = M.get("jax")
    if j is None or ARGS.cpu_only:
        return False
    try:
        return any(d.platform == "gpu" for d in j.devices())
    except Exception:
        return False


def measure(case, peer, step, sync, iters, note="", per=1):
    """Times `step` (iters calls then sync), repeated; records a row (times
    per call, or per `per`-th of a call)."""
    if ARGS.only and ARGS.only not in case:
        return
    reps = 3 if ARGS.quick else 7
    try:
        for _ in range(max(1, iters // 10)):
            step()
        sync()
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            for _ in range(iters):
                step()
            sync()
            times.append((time.perf_counter() - t0) / iters / per)
        row = {"case": case, "peer": peer, "median_s": statistics.median(times), "min_s": min(times),
               "max_s": max(times), "calls": iters, "note": note}
    except Exception as e:    # a peer that cannot run a case says why
        row = {"case": case, "peer": peer, "error": f"{type(e).__name__}: {str(e)[:80]}"}
    ROWS.append(row)
    print(fmt(row), flush=True)


def fmt(r):
    if "error" in r:
        return f"{r['case']:<44} {r['peer']:<16} {'n/a':>12}  {r['error']}"
    def us(s):
        return f"{s * 1e6:10.2f} us" if s < 1e-2 else f"{s * 1e3:10.3f} ms"
    return f"{r['case']:<44} {r['peer']:<16} {us(r['median_s'])} {us(r['min_s'])} {us(r['max_s'])}  {r['note']}"


def nothing():
    pass


def rng(seed):
    return np.random.RandomState(seed)


# >>exp: the GPU tutorial's loop, 10x30x768 float32 ------------------------------
def case_exp():
    x = rng(22).rand(10 * 30 * 768).astype(np.float32)
    n = 200 if ARGS.quick else 1000
    measure("exp 230400 f32", "numpy", lambda: np.exp(x), nothing, n)
    torch = M["torch"]
    if torch_gpu():
        xd = torch.from_numpy(x).cuda()
        sync = torch.cuda.synchronize
        measure("exp 230400 f32, copied to host", "torch", lambda: torch.exp(xd).cpu(), sync, n)
        measure("exp 230400 f32, on device", "torch", lambda: torch.exp(xd), sync, n)
        out = torch.empty_like(xd)
        measure("exp 230400 f32, into one buffer", "torch", lambda: torch.exp(xd, out=out), sync, n)
    if jax_gpu():
        jax, jnp = M["jax"], M["jax"].numpy
        xj = jax.device_put(x)
        f = jax.jit(jnp.exp)
        measure("exp 230400 f32, copied to host", "jax", lambda: np.asarray(f(xj)), nothing, n)
        last = [None]
        measure("exp 230400 f32, on device", "jax", lambda: last.__setitem__(0, f(xj)),
                lambda: last[0].block_until_ready(), n)
    cp = M["cupy"]
    if cp is not None and not ARGS.cpu_only:
        xc = cp.asarray(x)
        s = cp.cuda.Device().synchronize
        measure("exp 230400 f32, copied to host", "cupy", lambda: cp.asnumpy(cp.exp(xc)), s, n)
        measure("exp 230400 f32, on device", "cupy", lambda: cp.exp(xc), s, n)


# >>gemm: the blog's y = m.x + b, 1000x1000 float32 ------------------------------
def case_gemm():
    r = rng(123)
    m, x, b = (r.randn(1000, 1000).astype(np.float32) for _ in range(3))
    n = 50 if ARGS.quick else 500
    measure("gemm y = m.x + b 1000^2 f32", "numpy", lambda: m @ x + b, nothing, max(10, n // 5))
    torch = M["torch"]
    if torch is not None:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        mt, xt, bt = (torch.from_numpy(a) for a in (m, x, b))
        measure("gemm y = m.x + b 1000^2 f32", "torch cpu", lambda: torch.addmm(bt, mt, xt), nothing, max(10, n // 5))
    if torch_gpu():
        sync = torch.cuda.synchronize
        mp, xp, bp = (torch.from_numpy(a).pin_memory() for a in (m, x, b))
        md, xd, bd = (a.cuda() for a in (mp, xp, bp))
        yp = torch.empty((1000, 1000), dtype=torch.float32).pin_memory()

        def passed():
            yd = torch.addmm(bp.cuda(non_blocking=True), mp.cuda(non_blocking=True), xp.cuda(non_blocking=True))
            yp.copy_(yd, non_blocking=True)
        measure("gemm all inputs passed (pinned), y to host", "torch", passed, sync, n)
        measure("gemm all inputs passed (pageable), y to host", "torch",
                lambda: torch.addmm(torch.from_numpy(b).cuda(), torch.from_numpy(m).cuda(), torch.from_numpy(x).cuda()).cpu(),
                sync, n)
        measure("gemm m, b shared, x passed, y to host", "torch",
                lambda: torch.addmm(bd, md, torch.from_numpy(x).cuda()).cpu(), sync, n)
        yd = bd.clone()
        measure("gemm all shared, y = m.x + y in place", "torch", lambda: yd.addmm_(md, xd), sync, n)
        measure("gemm all shared, y = m.x + b new", "torch", lambda: torch.addmm(bd, md, xd), sync, n)
    if jax_gpu():
        jax = M["jax"]
        f = jax.jit(lambda m, x, b: m @ x + b)
        md, xd, bd = (jax.device_put(a) for a in (m, x, b))
        measure("gemm all inputs passed (pageable), y to host", "jax", lambda: np.asarray(f(m, x, b)), nothing, n)
        measure("gemm m, b shared, x passed, y to host", "jax", lambda: np.asarray(f(md, x, bd)), nothing, n)
        last = [None]
        measure("gemm all shared, y = m.x + b new", "jax", lambda: last.__setitem__(0, f(md, xd, bd)),
                lambda: last[0].block_until_ready(), n)
    cp = M["cupy"]
    if cp is not None and not ARGS.cpu_only:
        md, xd, bd = (cp.asarray(a) for a in (m, x, b))
        s = cp.cuda.Device().synchronize
        measure("gemm all inputs passed (pageable), y to host", "cupy",
                lambda: cp.asnumpy(cp.asarray(m) @ cp.asarray(x) + cp.asarray(b)), s, n)
        measure("gemm all shared, y = m.x + b new", "cupy", lambda: md @ xd + bd, s, n)


# >>chain: bench.c's fusion chain, 2^24 float32 ----------------------------------
def chain(xp, a, b, c, sigmoid):
    t = xp.tanh(a * b + c)
    s = xp.sqrt(xp.abs(b))
    return sigmoid(t * xp.exp(-a) + s - c * 0.5)


def case_chain():
    n = 1 << 24
    r = rng(101)
    a, b, c = (r.uniform(-2, 2, n).astype(np.float32) for _ in range(3))
    it = 4 if ARGS.quick else 10
    np_sig = lambda v: 1 / (1 + np.exp(-v))
    measure("chain 12 ops 2^24 f32", "numpy", lambda: chain(np, a, b, c, np_sig), nothing, it)
    measure("chain feeding a sum 2^24 f32", "numpy", lambda: chain(np, a, b, c, np_sig).sum(), nothing, it)
    torch = M["torch"]
    if torch is not None:
        ta, tb, tc = (torch.from_numpy(v) for v in (a, b, c))
        measure("chain 12 ops 2^24 f32", "torch cpu", lambda: chain(torch, ta, tb, tc, torch.sigmoid), nothing, it)
    if torch_gpu():
        sync = torch.cuda.synchronize
        da, db, dc = (torch.from_numpy(v).cuda() for v in (a, b, c))
        git = 20 if ARGS.quick else 100
        eager = lambda: chain(torch, da, db, dc, torch.sigmoid)
        measure("chain 12 ops 2^24 f32", "torch", eager, sync, git)
        measure("chain feeding a sum 2^24 f32", "torch", lambda: eager().sum(), sync, git)
        try:
            comp = torch.compile(lambda a, b, c: chain(torch, a, b, c, torch.sigmoid))
            comp_sum = torch.compile(lambda a, b, c: chain(torch, a, b, c, torch.sigmoid).sum())
            measure("chain 12 ops 2^24 f32", "torch.compile", lambda: comp(da, db, dc), sync, git)
            measure("chain feeding a sum 2^24 f32", "torch.compile", lambda: comp_sum(da, db, dc), sync, git)
        except Exception as e:
            ROWS.append({"case": "chain 12 ops 2^24 f32", "peer": "torch.compile", "error": str(e)[:80]})
    if jax_gpu():
        jax, jnp = M["jax"], M["jax"].numpy
        ja, jb, jc = (jax.device_put(v) for v in (a, b, c))
        f = jax.jit(lambda a, b, c: chain(jnp, a, b, c, jax.nn.sigmoid))
        fs = jax.jit(lambda a, b, c: chain(jnp, a, b, c, jax.nn.sigmoid).sum())
        last = [None]
        git = 20 if ARGS.quick else 100
        measure("chain 12 ops 2^24 f32", "jax", lambda: last.__setitem__(0, f(ja, jb, jc)),
                lambda: last[0].block_until_ready(), git)
        measure("chain feeding a sum 2^24 f32", "jax", lambda: last.__setitem__(0, fs(ja, jb, jc)),
                lambda: last[0].block_until_ready(), git)
    cp = M["cupy"]
    if cp is not None and not ARGS.cpu_only:
        ca, cb, cc = (cp.asarray(v) for v in (a, b, c))
        fused = cp.fuse(lambda a, b, c: chain(cp, a, b, c, lambda v: 1 / (1 + cp.exp(-v))))
        s = cp.cuda.Device().synchronize
        measure("chain 12 ops 2^24 f32", "cupy fuse", lambda: fused(ca, cb, cc), s, 20 if ARGS.quick else 100)


# >>logreg: the tutorial's logistic regression, N=400, 784 features --------------
def logreg_data():
    r = rng(7)
    x = r.randn(400, 784).astype(np.float32)
    y = (r.rand(400) >= 0.5).astype(np.float32)
    w = (r.randn(784) / 28.0).astype(np.float32)
    return x, y, w


def case_logreg():
    x, y, w0 = logreg_data()
    n = 200 if ARGS.quick else 2000
    torch = M["torch"]

    def torch_step(x, y, w, b):
        z = x @ w + b
        p1 = torch.sigmoid(z)
        # the tutorial's cross-entropy in its stable form, plus 0.01 * sum(w^2)
        xent = torch.nn.functional.binary_cross_entropy_with_logits(z, y, reduction="none")
        cost = xent.mean() + 0.01 * (w * w).sum()
        gw, gb = torch.autograd.grad(cost, (w, b))
        with torch.no_grad():
            w -= 0.1 * gw
            b -= 0.1 * gb
        return p1 > 0.5, xent

    if torch is not None:
        for dev in (["cpu", "cuda"] if torch_gpu() else ["cpu"]):
            w = torch.from_numpy(w0.copy()).to(dev).requires_grad_()
            b = torch.zeros((), device=dev, requires_grad=True)
            xd, yd = torch.from_numpy(x).to(dev), torch.from_numpy(y).to(dev)
            sync = torch.cuda.synchronize if dev == "cuda" else nothing
            peer = "torch" if dev == "cuda" else "torch cpu"
            measure("logreg step, data on device", peer, lambda: torch_step(xd, yd, w, b), sync, n)
            if dev == "cuda":
                def passed():
                    pred, xent = torch_step(torch.from_numpy(x).cuda(), torch.from_numpy(y).cuda(), w, b)
                    return pred.cpu(), xent.cpu()
                measure("logreg step, x y passed, outputs to host", peer, passed, sync, n)
    if jax_gpu():
        jax, jnp = M["jax"], M["jax"].numpy

        def cost(w, b, x, y):
            z = x @ w + b
            xent = jnp.logaddexp(0.0, z) - y * z
            return xent.mean() + 0.01 * (w * w).sum(), (jax.nn.sigmoid(z) > 0.5, xent)

        @jax.jit
        def step(w, b, x, y):
            (c, (pred, xent)), (gw, gb) = jax.value_and_grad(cost, argnums=(0, 1), has_aux=True)(w, b, x, y)
            return w - 0.1 * gw, b - 0.1 * gb, pred, xent

        st = [jax.device_put(w0), jax.device_put(np.float32(0))]
        xd, yd = jax.device_put(x), jax.device_put(y)

        def on_device():
            st[0], st[1], _, _ = step(st[0], st[1], xd, yd)

        def passed():
            st[0], st[1], pred, xent = step(st[0], st[1], x, y)
            np.asarray(pred), np.asarray(xent)
        measure("logreg step, data on device", "jax", on_device, lambda: st[0].block_until_ready(), n)
        measure("logreg step, x y passed, outputs to host", "jax", passed, nothing, n)


# >>conv: the convolution issue's layer shapes -----------------------------------
CONV_SHAPES = [  # N, C_in, C_out, k, H
    (64, 3, 64, 3, 32),
    (64, 64, 128, 3, 16),
    (64, 128, 128, 1, 8),
]


def case_conv():
    torch = M["torch"]
    if torch is None:
        return
    F = torch.nn.functional
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    devs = ["cpu"] + (["cuda"] if torch_gpu() else [])
    for dev in devs:
        for dt in ([torch.float32] if dev == "cpu" else [torch.float32, torch.float16]):
            for (n, ci, co, k, h) in CONV_SHAPES:
                r = rng(5)
                x = torch.from_numpy(r.randn(n, ci, h, h).astype(np.float32)).to(dev, dt).requires_grad_()
                w = torch.from_numpy((r.randn(co, ci, k, k) / np.sqrt(ci * k * k)).astype(np.float32)).to(dev, dt).requires_grad_()
                pad = k // 2
                sync = torch.cuda.synchronize if dev == "cuda" else nothing
                it = (5 if ARGS.quick else 20) if dev == "cpu" else (20 if ARGS.quick else 200)
                name = f"conv2d {ci}->{co} {k}x{k} @{h} N={n} {'f16' if dt == torch.float16 else 'f32'}"
                peer = "torch cudnn" if dev == "cuda" else "torch cpu"
                measure(name + " fwd", peer, lambda: F.conv2d(x, w, padding=pad), sync, it)
                y = F.conv2d(x, w, padding=pad)
                gy = torch.ones_like(y)
                measure(name + " fwd+bwd", peer,
                        lambda: torch.autograd.grad(F.conv2d(x, w, padding=pad), (x, w), gy), sync, it)
            # pooling and gather: bandwidth cases
            if dev == "cuda":
                sync = torch.cuda.synchronize
                x = torch.randn(64, 128, 32, 32, device=dev, dtype=dt)
                xg = x.clone().requires_grad_()
                gy = torch.randn(64, 128, 16, 16, device=dev, dtype=dt)
                ds = 'f16' if dt == torch.float16 else 'f32'
                for pn, pf in (("max_pool2d", F.max_pool2d), ("avg_pool2d", F.avg_pool2d)):
                    measure(f"{pn} 2x2 (64,128,32,32) {ds}", "torch", lambda: pf(x, 2), sync, 200)
                    def fwd_bwd(pf=pf):
                        y = pf(xg, 2)
                        return y, torch.autograd.grad(y, xg, gy)
                    measure(f"{pn} 2x2 (64,128,32,32) {ds} fwd+bwd", "torch", fwd_bwd, sync, 200)
                t = torch.randn(1 << 20, 64, device=dev, dtype=dt)
                idx = torch.randint(0, 1 << 20, (1 << 20,), device=dev)
                measure(f"take rows (2^20 x 64) {dt}", "torch", lambda: t.index_select(0, idx), sync, 200)
                acc = torch.zeros_like(t)
                measure(f"scatter-add rows (2^20 x 64) {dt}", "torch", lambda: acc.index_add_(0, idx, t), sync, 200)


# >>random: bench.c's random_cases, 2^24 float32 ---------------------------------
def case_random():
    n = 1 << 24
    it = 20 if ARGS.quick else 100
    torch = M["torch"]
    if torch_gpu():
        sync = torch.cuda.synchronize
        x = torch.rand(n, device="cuda")
        out = torch.empty_like(x)
        measure("uniform 2^24 f32", "torch", lambda: out.uniform_(0, 1), sync, it)
        measure("normal 2^24 f32", "torch", lambda: out.normal_(0, 1), sync, it)
        F = torch.nn.functional
        measure("dropout 0.25 of 2^24 f32", "torch", lambda: F.dropout(x, 0.25, training=True), sync, it)
    if jax_gpu():
        jax = M["jax"]
        x = jax.device_put(np.ones(n, np.float32))
        key = jax.random.PRNGKey(13)
        uni = jax.jit(lambda k: jax.random.uniform(k, (n,), np.float32))
        nrm = jax.jit(lambda k: jax.random.normal(k, (n,), np.float32))
        drop = jax.jit(lambda k, x: jax.numpy.where(jax.random.bernoulli(k, 0.75, x.shape), x / 0.75, 0))
        last = [None]
        measure("uniform 2^24 f32", "jax", lambda: last.__setitem__(0, uni(key)), lambda: last[0].block_until_ready(), it)
        measure("normal 2^24 f32", "jax", lambda: last.__setitem__(0, nrm(key)), lambda: last[0].block_until_ready(), it)
        measure("dropout 0.25 of 2^24 f32", "jax", lambda: last.__setitem__(0, drop(key, x)), lambda: last[0].block_until_ready(), it)


# >>convnet: examples/convnet.c's training step, batch 32 -------------------------
# conv 3x3 1->16 pad 1, relu, max pool 2x2, conv 3x3 16->32 pad 1, relu, max pool
# 2x2, flatten, dropout 0.25, dense 128->10, mean NLL of log_softmax; SGD with
# momentum as the library's step (v <- 0.9 v - 0.05 g; p <- p + v), the batch
# on the device, float32, TF32 off. bench.c's convnet_cases is the same step.
CONVNET_SHAPES = [((16, 1, 3, 3), 9), ((16,), 0), ((32, 16, 3, 3), 144), ((32,), 0), ((128, 10), 128), ((10,), 0)]


def convnet_init(batch=32):
    r = rng(5)
    ps = [((r.rand(*s) * 2 - 1) * np.sqrt(6.0 / fan)).astype(np.float32) if fan else np.zeros(s, np.float32)
          for s, fan in CONVNET_SHAPES]
    return ps, r.rand(batch, 64).astype(np.float32), r.randint(0, 10, batch).astype(np.int64)


def case_convnet():
    torch = M["torch"]
    ps0, x0, y0 = convnet_init()
    if torch is not None:
        F = torch.nn.functional
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False

        def loss(P, x, y):
            img = x.reshape(-1, 1, 8, 8)
            h1 = F.max_pool2d(F.relu(F.conv2d(img, P[0], P[1], padding=1)), 2)
            h2 = F.max_pool2d(F.relu(F.conv2d(h1, P[2], P[3], padding=1)), 2)
            f = F.dropout(h2.flatten(1), 0.25, training=True)
            return F.cross_entropy(f @ P[4] + P[5], y)       # the mean NLL of log_softmax

        for dev in (["cpu", "cuda"] if torch_gpu() else ["cpu"]):
            sync = torch.cuda.synchronize if dev == "cuda" else nothing
            kinds = [("eager", loss)] + ([("compile", torch.compile(loss))] if dev == "cuda" else [])
            for kind, fn in kinds:
                P = [torch.from_numpy(p).to(dev).requires_grad_() for p in ps0]
                V = [torch.zeros_like(p) for p in P]
                x, y = torch.from_numpy(x0).to(dev), torch.from_numpy(y0).to(dev)

                def step(P=P, V=V, x=x, y=y, fn=fn):
                    gs = torch.autograd.grad(fn(P, x, y), P)
                    with torch.no_grad():
                        torch._foreach_mul_(V, 0.9)
                        torch._foreach_add_(V, gs, alpha=-0.05)
                        torch._foreach_add_(P, V)
                peer = ("torch" if kind == "eager" else "torch.compile") if dev == "cuda" else "torch cpu"
                n = (20 if ARGS.quick else 100) if dev == "cpu" else (200 if ARGS.quick else 2000)
                measure("convnet step B=32 f32, data on device", peer, step, sync, n)
    if jax_gpu():
        jax, jnp = M["jax"], M["jax"].numpy

        def conv(a, w, b):
            z = jax.lax.conv_general_dilated(a, w, (1, 1), ((1, 1), (1, 1)), dimension_numbers=("NCHW", "OIHW", "NCHW"),
                                             precision=jax.lax.Precision.HIGHEST)
            return z + b.reshape(1, -1, 1, 1)

        def pool(a):
            return jax.lax.reduce_window(a, -jnp.inf, jax.lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")

        def loss(P, x, y, key):
            h1 = pool(jax.nn.relu(conv(x.reshape(-1, 1, 8, 8), P[0], P[1])))
            h2 = pool(jax.nn.relu(conv(h1, P[2], P[3])))
            f = h2.reshape(h2.shape[0], -1)
            f = jnp.where(jax.random.bernoulli(key, 0.75, f.shape), f / 0.75, 0)
            z = f @ P[4] + P[5]
            return -jnp.mean(jnp.sum(jax.nn.one_hot(y, 10) * jax.nn.log_softmax(z), axis=1))

        @jax.jit
        def step(P, V, x, y, key):
            key, sub = jax.random.split(key)
            g = jax.grad(loss)(P, x, y, sub)
            V = [0.9 * v - 0.05 * gi for v, gi in zip(V, g)]
            return [p + v for p, v in zip(P, V)], V, key

        st = [[jax.device_put(p) for p in ps0], [jax.device_put(np.zeros_like(p)) for p in ps0], jax.random.PRNGKey(42)]
        xd, yd = jax.device_put(x0), jax.device_put(y0.astype(np.int32))

        def run():
            st[0], st[1], st[2] = step(st[0], st[1], xd, yd, st[2])
        measure("convnet step B=32 f32, data on device", "jax", run, lambda: st[0][0].block_until_ready(),
                200 if ARGS.quick else 2000)


# >>rnn: the deck's recurrent network (examples/rnn_scan.c), bench.c's scan_cases --
RNN_X, RNN_U, RNN_Y, RNN_L = 6, 3, 2, 1004
RNN_T = RNN_L - 4


def rnn_params():
    r = rng(100)
    shapes = [(RNN_X, RNN_X), (RNN_X, RNN_U), (RNN_X, RNN_U), (RNN_X, RNN_Y), (RNN_Y, RNN_X), (RNN_L, RNN_U), (3, RNN_X),
              (RNN_Y,)]
    return [r.uniform(-0.7, 0.7, s) for s in shapes]


def case_rnn():
    P = rnn_params()
    n = 5 if ARGS.quick else 20
    if jax_gpu():
        jax, jnp = M["jax"], M["jax"].numpy
        jax.config.update("jax_enable_x64", True)

        def loop(W, W1, W2, Wf, Wout, u, x0, y0):
            def step(carry, uu):
                xh, ym1 = carry                      # xh: x(n-3), x(n-2), x(n-1)
                u4, u0 = uu
                x = jnp.tanh(W @ xh[2] + W1 @ u0 + (W2 @ u4 + Wf @ ym1))
                y = Wout @ xh[0]
                return (jnp.stack([xh[1], xh[2], x]), y), (x, y)
            _, (xs, ys) = jax.lax.scan(step, (x0, y0), (u[:-4], u[4:]))
            return xs, ys

        fwd = jax.jit(loop)

        def cost(W, *rest):
            return jnp.sum(loop(W, *rest)[1] ** 2)
        both = jax.jit(lambda *p: (loop(*p), jax.grad(cost)(*p)))
        dp = [jax.device_put(p) for p in P]
        out = [None]

        def run_fwd():
            out[0] = fwd(*dp)

        def run_both():
            out[0] = both(*dp)
        measure("rnn_scan forward, per step", "jax", run_fwd, lambda: jax.block_until_ready(out[0]), n, "lax.scan, jit", RNN_T)
        measure("rnn_scan fwd + BPTT grad, per step", "jax", run_both, lambda: jax.block_until_ready(out[0]), n,
                "lax.scan, jit", RNN_T)
        jax.config.update("jax_enable_x64", False)
    torch = M["torch"]
    if torch is not None:
        for dev in (["cpu", "cuda"] if torch_gpu() else ["cpu"]):
            tp = [torch.from_numpy(p).to(dev) for p in P]
            sync = torch.cuda.synchronize if dev == "cuda" else nothing
            peer = "torch" if dev == "cuda" else "torch cpu"

            def loop(W, W1, W2, Wf, Wout, u, x0, y0):
                xs, ys = [x0[0], x0[1], x0[2]], [y0]
                for t in range(RNN_T):
                    x = torch.tanh(W @ xs[-1] + W1 @ u[t + 4] + (W2 @ u[t] + Wf @ ys[-1]))
                    ys.append(Wout @ xs[-3])
                    xs.append(x)
                return torch.stack(xs[3:]), torch.stack(ys[1:])

            def run_fwd():
                with torch.no_grad():
                    loop(*tp)

            def run_both():
                W = tp[0].clone().requires_grad_()
                xs, ys = loop(W, *tp[1:])
                (ys * ys).sum().backward()
            measure("rnn_scan forward, per step", peer, run_fwd, sync, n, "Python loop, eager", RNN_T)
            measure("rnn_scan fwd + BPTT grad, per step", peer, run_both, sync, n, "Python loop, eager", RNN_T)


CASES = {"exp": case_exp, "gemm": case_gemm, "chain": case_chain, "logreg": case_logreg, "conv": case_conv,
         "random": case_random, "convnet": case_convnet, "rnn": case_rnn}


def main():
    global ARGS, M
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--cpu-only", action="store_true")
    p.add_argument("--only", default="")
    p.add_argument("--json", default="")
    ARGS = p.parse_args()
    M = peer_modules()
    have = ", ".join(f"{k} {getattr(v, '__version__', '')}".strip() for k, v in M.items() if v is not None)
    print(f"peers: {have}", flush=True)
    if torch_gpu():
        print(f"gpu: {M['torch'].cuda.get_device_name(0)}", flush=True)
    print(f"{'case':<44} {'peer':<16} {'median':>13} {'min':>13} {'max':>13}")
    for name, fn in CASES.items():
        try:
            fn()
        except Exception as e:
            print(f"{name}: {type(e).__name__}: {e}", file=sys.stderr)
    if ARGS.json:
        with open(ARGS.json, "w") as f:
            json.dump({"peers": have, "rows": ROWS}, f, indent=1)


if __name__ == "__main__":
    main()
