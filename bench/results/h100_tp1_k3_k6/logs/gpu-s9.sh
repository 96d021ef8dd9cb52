#!/bin/bash
# session of d901641: tp=1 rows at the tracks per GPU of prospective_e03b4bc (k = 3, 6 at 124m; 5 at large), the
# calibration that `bench.step_model --size/--tp/--policy` asks for past the measured k. One GPU each, at once.
export PYTHONUNBUFFERED=1
R=/tmp/res; mkdir -p $R/logs; SRC="$(cd "$(dirname "$0")/.." && pwd)"; COMMIT=$(cd $SRC && git rev-parse --short HEAD 2>/dev/null)
rm -rf /tmp/tree; cp -r "$SRC" /tmp/tree; cd /tmp/tree
T0=$(date +%s)
log() { echo "== $* $(date +%T) (+$(( $(date +%s) - T0 )) s)"; }
log "master start: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tr '\n' ';') commit $COMMIT"
TL="python -m bench.tp_latency --warmup 2 --repeats 10 --rounds 3 --modes graph --policies baseline;spd;parallel;grouped:4"
(CUDA_VISIBLE_DEVICES=0 timeout 400 $TL --sizes 124m --n_tracks 3,6 --out_dir $R/t1_124m > $R/logs/t1_124m.log 2>&1; log "t1_124m rc $?") &
(CUDA_VISIBLE_DEVICES=1 timeout 400 $TL --sizes large --n_tracks 5 --out_dir $R/t1_large > $R/logs/t1_large.log 2>&1; log "t1_large rc $?") &
wait; log "all done"; touch $R/DONE
