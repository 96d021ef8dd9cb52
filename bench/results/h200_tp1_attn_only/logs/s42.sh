#!/bin/bash
# session of 2026-11-26 (twelfth), call 6, on 4 GPUs (nvidia-h100-x4; the lender has given H200s every time). If H100s:
# s40.sh's H100 branch (the 4-rank sweep and the tp=4 rows of prospective_2b98aa0 on H100, then the trainer's
# tp=4 step at 124m). If H200s: tp=1 rows on H200 of attention-only syncs (selective:a0-<L-1>,m<L-1>) at n_tracks 2
# beside baseline, 124m, medium and large, every workload: the H200 twins of bench/results/h100_tp1_attn_only/, so
# that a split holding H100 out fits c_mlp from H200's own rows (leave one device out's worst rows at k <= 2 are
# H100's attention-only selective sets, priced from H200 families that never ran one). One process per GPU.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
R=/tmp/res; mkdir -p $R/logs; SRC="$(cd "$(dirname "$0")/.." && pwd)"; COMMIT=$(cd $SRC && git rev-parse --short HEAD 2>/dev/null)
rm -rf /tmp/tree; cp -r "$SRC" /tmp/tree; cd /tmp/tree
T0=$(date +%s)
log() { echo "== $* $(date +%T) (+$(( $(date +%s) - T0 )) s)"; }
st() { local lim=$1 name=$2; shift 2; log "$name start"; timeout $lim "$@" > $R/logs/$name.log 2>&1; log "$name rc $?"; }
GPU="$(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tr '\n' ';')"
log "master start: $GPU commit $COMMIT"
nvidia-smi topo -m > $R/logs/topo.txt 2>&1
case "$GPU" in *H100*) H100=1 ;; *) H100=0 ;; esac
TT="torchrun --standalone --nproc_per_node=4 -m bench.train_throughput --modes compiled-graphs --warmup 8 --iters 20 --variants tp2 --policies baseline,spd,grouped:4 --tp2_n_tracks 4"
if [ $H100 = 1 ]; then
    st 120 sweep4 torchrun --standalone --nproc_per_node=4 -m bench.allreduce_sweep --between 1024 --producer gemm --out_dir $R/sweep4
    TL="torchrun --standalone --nproc_per_node=4 -m bench.tp_latency --no_torch_tp --warmup 2 --repeats 10 --rounds 3 --modes graph"
    P="baseline;ladder;spd;parallel;grouped:4"
    INF=prefill_b1,prefill_b8,decode_b1,decode_b8
    st 200 tl_124m $TL --sizes 124m --n_tracks 4,12 --policies "$P" --out_dir $R/tl_124m
    st 200 tl_medium $TL --sizes medium --n_tracks 4,8 --policies "$P" --workloads $INF --out_dir $R/tl_medium
    st 200 tl_medium_train $TL --sizes medium --n_tracks 4,8 --policies "$P" --workloads train_b8 --out_dir $R/tl_medium_train
    st 200 tl_large $TL --sizes large --n_tracks 4 --policies "$P" --out_dir $R/tl_large
    log "tp=4 done"; touch $R/TP4_DONE
    st 200 tt4_124m $TT --size 124m --out_dir $R/tt4_124m
else
    T1="python -m bench.tp_latency --warmup 2 --repeats 10 --rounds 3 --modes graph --no_torch_tp --n_tracks 2"
    jobs_on() {  # $1 gpu, then "size|last layer|workload" items
        local gpu=$1; shift
        for job in "$@"; do
            IFS='|' read size last w <<< "$job"; tag=${size}_n2_${w}
            CUDA_VISIBLE_DEVICES=$gpu timeout 240 $T1 --sizes $size --policies "baseline;selective:a0-$last,m$last" --workloads $w --out_dir $R/t_$tag > $R/logs/$tag.log 2>&1
            log "$tag rc $?"
        done
    }
    jobs_on 0 "large|35|prefill_b8" "large|35|train_b8" "large|35|prefill_b1" &
    jobs_on 1 "large|35|decode_b1" "large|35|decode_b8" "124m|11|prefill_b8" "124m|11|train_b8" &
    jobs_on 2 "medium|23|prefill_b8" "medium|23|train_b8" "medium|23|prefill_b1" "124m|11|prefill_b1" &
    jobs_on 3 "medium|23|decode_b1" "medium|23|decode_b8" "124m|11|decode_b1" "124m|11|decode_b8" &
    wait
fi
log "all done"; touch $R/DONE
