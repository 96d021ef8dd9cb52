#!/bin/bash
# the training loop compiled with graphs at tp=2: 1bdb054 (before) and this tree (after), back to back, twice
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 PYTHONUNBUFFERED=1
R=/tmp/res7; mkdir -p $R/logs; rm -rf /tmp/tree /tmp/before; cp -r . /tmp/tree; mkdir /tmp/before; tar xf .gpu/before.tar -C /tmp/before
echo "$(nvidia-smi --query-gpu=name --format=csv,noheader | tr '\n' ';')"
TT="torchrun --standalone --nproc_per_node=2 -m bench.train_throughput --variants tp2 --modes compiled-graphs --warmup 10 --iters 30 --size 124m --policies baseline,spd,parallel,grouped:4 --tp2_n_tracks 2"
for v in before after; do d=/tmp/tree; [ $v = before ] && d=/tmp/before
  echo "== $v $(date +%T)"; (cd $d && timeout 200 $TT --out_dir $R/$v) > $R/logs/tt_$v.log 2>&1; echo "rc $?"
  grep "^| ours" $R/$v/train_throughput.md; done
cd $R && tar czf $OUT/all.tgz . ; ls -la $OUT
