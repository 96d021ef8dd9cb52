"""Bucketed data-parallel gradient sync, overlapped with backward (a small PyTorch DDP Reducer).

What it computes. Each of the N ranks of the data-parallel group runs backward on its own
micro-batch and holds local gradients g_r. After `finish_gradient_synchronization()` every rank's
`.grad` holds, for every trainable parameter,

    g_avg = (1/N) * sum_r g_r

computed per bucket as one SUM all-reduce of the bucket's flat buffer followed by a division by
N (never ReduceOp.AVG: gloo mishandles it). With the per-rank loss a mean over equal local
batches, g_avg is the gradient of the mean loss over the global batch.

Design.
- process_group=None means the whole world when torch.distributed is initialized (as in torch
  DDP), else a single process. Ranks are always the group's own indices, never global ranks.
- On wrap, every parameter and buffer (frozen ones included) is broadcast from the group's
  first rank, so all replicas start equal.
- Trainable parameters are taken in reverse registration order (about the order backward
  produces their gradients) and packed into buckets: a first bucket of `first_bucket_cap_mb`,
  then `bucket_cap_mb` each (MiB; a bucket closes once it reaches its cap, so a tiny cap gives
  one parameter per bucket; None or inf gives one bucket). A bucket holds one dtype on one
  device and owns a flat buffer. `module.parameters()` dedups tied parameters, so a tied weight
  is reduced once.
- A post-accumulate-grad hook on each parameter marks it ready. When every parameter of a
  bucket is ready, its grads are copied into the flat buffer and an async all-reduce is
  launched, so communication overlaps the rest of backward. Buckets launch strictly in order
  (bucket i only after bucket i-1), so every rank issues the collectives in the same order.
- `finish_gradient_synchronization()` launches what is left, waits for all buckets, divides by
  N and copies the result into each `.grad`. Grads are copied in and out (the buffer is never a
  view of `.grad`), so `zero_grad(set_to_none=True)` is fine.
- After the first synced step the buckets are rebuilt in the order the gradients actually
  arrived (group rank 0's order, broadcast once), as PyTorch does.
- A group of one rank (dp=1) reduces nothing: no buffers are allocated and no grads copied.
- `no_sync()`: hooks do nothing, grads accumulate locally; the next synced backward reduces the
  accumulated grads.
- Parameters that get no gradient in a synced step: with find_unused_parameters=False,
  `finish_gradient_synchronization()` raises a RuntimeError naming them (after draining the
  launched buckets, so nothing hangs when all ranks agree). With True, such a parameter
  contributes its existing `.grad` (accumulated under no_sync) or zeros, and its `.grad` is set
  to the reduced value on every rank, so all replicas stay equal. Unlike PyTorch DDP, a
  parameter unused on every rank gets a zero `.grad`, not None (which costs PyTorch an extra
  all-reduce of a used-map); optimizers with weight decay then still decay it.
  Which parameters are unused must agree across ranks when find_unused_parameters=False,
  otherwise the ranks issue different collectives and hang.

Modes (for the benchmark; all share this code, only bucketing and launch time differ; only
"bucketed" reads the bucket caps):
  "bucketed": buckets as above, launched from the hooks (default).
  "overlap":  one bucket per parameter, launched from the hooks.
  "naive":    one bucket per parameter, all launched after backward, in finish.
  "flat":     one bucket of all grads (per dtype/device), launched after backward, in finish.
"""
import math
from contextlib import contextmanager

import torch
import torch.distributed as dist
import torch.nn as nn

from parallel import comm

MODES = ("bucketed", "overlap", "naive", "flat")
HOOK_MODES = ("bucketed", "overlap")


def _check_cap(name, value, allow_none):
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        allowed = "a positive number of MiB, inf" + (" or None" if allow_none else "")
        raise ValueError(f"{name}={value!r} is not allowed; use {allowed}")


def assign_buckets(params, first_cap_bytes, cap_bytes):
    """Split `params` (in order) into lists; a list closes once it reaches its cap or at a dtype/device change."""
    buckets, cur, size = [], [], 0
    for p in params:
        if cur and (p.dtype, p.device) != (cur[0].dtype, cur[0].device):
            buckets.append(cur)
            cur, size = [], 0
        cur.append(p)
        size += p.numel() * p.element_size()
        if size >= (first_cap_bytes if not buckets else cap_bytes):
            buckets.append(cur)
            cur, size = [], 0
    if cur:
        buckets.append(cur)
    return buckets


class Bucket:
    def __init__(self, params, indices):
        self.params = params
        self.indices = indices
        self.buffer = None  # allocated at the first launch: a group of one rank never needs it
        self.pending = len(params)  # params not yet ready in this backward
        self.work = None


class BucketedDDP(nn.Module):
    def __init__(self, module, process_group=None, bucket_cap_mb=25, first_bucket_cap_mb=1,
                 mode="bucketed", find_unused_parameters=False):
        super().__init__()
        if mode not in MODES:
            raise ValueError(f"mode={mode!r} is not allowed; use one of {MODES}")
        _check_cap("bucket_cap_mb", bucket_cap_mb, allow_none=True)
        _check_cap("first_bucket_cap_mb", first_bucket_cap_mb, allow_none=False)
        if process_group is None and dist.is_available() and dist.is_initialized():
            process_group = dist.group.WORLD  # as torch DDP; comm reads None as "one rank"
        self.module = module
        self.group = process_group
        self.world = comm.group_size(process_group)
        self.mode = mode
        self.find_unused_parameters = find_unused_parameters
        if mode in ("naive", "overlap"):
            self.caps = (0, 0)  # every parameter reaches a cap of 0: one per bucket
        elif mode == "flat" or bucket_cap_mb is None or math.isinf(bucket_cap_mb):
            self.caps = (math.inf, math.inf)
        else:
            self.caps = (first_bucket_cap_mb * 2**20, bucket_cap_mb * 2**20)

        with torch.no_grad():
            for t in list(module.parameters()) + list(module.buffers()):
                comm.broadcast(t.data, 0, process_group)

        named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
        self.names = [n for n, _ in named]
        self.params = [p for _, p in named]
        self._sync = True
        # rebuild buckets after the first synced step; a group of one rank has nothing to reduce
        self._record_order = mode in HOOK_MODES and self.world > 1
        self._build_buckets(list(reversed(range(len(self.params)))))
        self._reset_step()
        self._hooks = [p.register_post_accumulate_grad_hook(self._make_hook(i))
                       for i, p in enumerate(self.params)]

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def _build_buckets(self, order):
        groups = assign_buckets([self.params[i] for i in order], *self.caps)
        self.buckets, self._bucket_of, k = [], {}, 0
        for ps in groups:
            idx = order[k:k + len(ps)]
            k += len(ps)
            b = Bucket(ps, idx)
            self.buckets.append(b)
            for i in idx:
                self._bucket_of[i] = b

    def _reset_step(self):
        self._ready = [False] * len(self.params)
        self._arrival = []  # indices in the order their grads got ready (first step only)
        self._next = 0  # first bucket not yet launched
        for b in self.buckets:
            b.pending, b.work = len(b.params), None

    def _make_hook(self, i):
        def hook(p):
            if not self._sync:
                return
            if self._ready[i]:
                raise RuntimeError(
                    f"parameter {self.names[i]!r} got a second gradient in one synced step: call "
                    f"finish_gradient_synchronization() after each backward, or run the earlier "
                    f"backwards inside no_sync()")
            self._ready[i] = True
            if self._record_order:
                self._arrival.append(i)
            b = self._bucket_of[i]
            b.pending -= 1
            if b.pending == 0 and self.mode in HOOK_MODES and self.world > 1:
                self._launch_in_order(stop_at_unready=True)
        return hook

    def _launch_in_order(self, stop_at_unready):
        while self._next < len(self.buckets):
            b = self.buckets[self._next]
            if stop_at_unready and b.pending > 0:
                return
            self._launch(b)
            self._next += 1

    def _launch(self, b):
        if b.buffer is None:
            b.buffer = torch.empty(sum(p.numel() for p in b.params), dtype=b.params[0].dtype,
                                   device=b.params[0].device)
        off = 0
        for p in b.params:
            n = p.numel()
            if p.grad is None:  # unused this step (find_unused_parameters=True): contributes zeros
                b.buffer[off:off + n].zero_()
            else:
                b.buffer[off:off + n].copy_(p.grad.reshape(-1))
            off += n
        b.work = comm.all_reduce(b.buffer, self.group, "dp_grad", async_op=True)

    @torch.no_grad()
    def finish_gradient_synchronization(self):
        """Wait for every bucket and write g_avg into each trainable parameter's .grad."""
        try:
            missing = [self.names[i] for i, r in enumerate(self._ready) if not r]
            if missing and not self.find_unused_parameters:
                self._wait_launched()
                raise RuntimeError(
                    f"these parameters got no gradient in this backward: {missing}. "
                    f"If they are unused in forward, wrap with find_unused_parameters=True; "
                    f"if the backward ran inside no_sync(), run the last micro-step outside it")
            if self.world == 1:  # the local grads are already the average: no copies, no buffers
                for p in self.params:
                    if p.grad is None:  # unused (find_unused_parameters=True): zeros, as with peers
                        p.grad = torch.zeros_like(p)
                return
            self._launch_in_order(stop_at_unready=False)
            for b in self.buckets:
                if b.work is not None:
                    b.work.wait()
                b.buffer.div_(self.world)
                off = 0
                for p in b.params:
                    g = b.buffer[off:off + p.numel()].view(p.shape)
                    if p.grad is None:
                        p.grad = g.clone()
                    else:
                        p.grad.copy_(g)
                    off += p.numel()
            if self._record_order:
                self._rebuild_from_arrival()
        finally:
            self._reset_step()

    def _wait_launched(self):
        for b in self.buckets:
            if b.work is not None:
                b.work.wait()

    def _rebuild_from_arrival(self):
        """Rebuild buckets in the order grads arrived on group rank 0 (broadcast so ranks agree)."""
        self._record_order = False
        seen = set(self._arrival)
        order = self._arrival + [i for i in reversed(range(len(self.params))) if i not in seen]
        if not order:
            return
        t = torch.tensor(order, dtype=torch.int64, device=self.params[0].device)
        comm.broadcast(t, 0, self.group)
        order = t.tolist()  # once, after the first step
        if order != [i for b in self.buckets for i in b.indices]:
            self._build_buckets(order)

    @contextmanager
    def no_sync(self):
        """Skip gradient communication: grads accumulate locally until a backward outside this block."""
        prev, self._sync = self._sync, False
        try:
            yield
        finally:
            self._sync = prev

    def remove_hooks(self):
        """Detach from the module (so it can be wrapped again, e.g. by another variant)."""
        for h in self._hooks:
            h.remove()
        self._hooks = []
