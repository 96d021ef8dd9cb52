# The check behind gpu-diagnostic-after-fix.log (one H200 call, commit 0422429, repository root): grad norms, compiled against eager
set -u
d=/tmp/diag2; mkdir -p $d
common="config/shakespeare_char_384.py --n_tracks=2 --seed=1337 --max_iters=40 --eval_interval=1000 --eval_iters=1 --log_interval=5 --always_save_checkpoint=False"
for pol in grouped:2 spd parallel; do
  for c in True False; do
    timeout 150 python train_reduced_sync.py $common --sync_policy=$pol --compile=$c --out_dir=$d/${pol/:/}-compile$c > $d/${pol/:/}-$c.log 2>&1 &
  done
done
wait
for f in $d/*/metrics.jsonl; do echo "$f: $(python -c "
import json
print([(r['iter'], round(r['grad_norm'],2), round(r['loss'],3)) for r in map(json.loads, open('$f')) if r['type']=='train'])")"; done
