# The GPU diagnostic behind gpu-diagnostic.log (one 2x H200 call, commit cc436e8, repository root):
# grouped:2 and spd, 150 iterations of config/shakespeare_char_384.py, compiled bf16 / eager bf16 /
# compiled fp32, three runs at once per GPU; prints each run's (iter, grad_norm, loss).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
d=/tmp/diag; mkdir -p $d
common="config/shakespeare_char_384.py --n_tracks=2 --seed=1337 --max_iters=150 --eval_interval=1000 --eval_iters=1 --log_interval=10 --always_save_checkpoint=False"
gpu=0
for pol in grouped:2 spd; do
  t=${pol/:/}
  CUDA_VISIBLE_DEVICES=$gpu timeout 170 python train_reduced_sync.py $common --sync_policy=$pol --compile=True --out_dir=$d/$t-compile-bf16 > $d/$t-compile-bf16.log 2>&1 &
  CUDA_VISIBLE_DEVICES=$gpu timeout 170 python train_reduced_sync.py $common --sync_policy=$pol --compile=False --out_dir=$d/$t-eager-bf16 > $d/$t-eager-bf16.log 2>&1 &
  CUDA_VISIBLE_DEVICES=$gpu timeout 170 python train_reduced_sync.py $common --sync_policy=$pol --compile=True --dtype=float32 --out_dir=$d/$t-compile-fp32 > $d/$t-compile-fp32.log 2>&1 &
  gpu=1
done
wait
for f in $d/*/metrics.jsonl; do echo "$f: $(python -c "
import json
print([(r['iter'], round(r['grad_norm'],2), round(r['loss'],3)) for r in map(json.loads, open('$f')) if r['type']=='train'])")"; done
