#!/usr/bin/env bash
# The GPU runs behind bench/results/ (tp_latency, profiles, sync_frequency), one machine per call:
#   bash bench/gpu_suite.sh tp2 OUT_DIR [PARTS]   # 2 GPUs: tp=2 (124M and medium with n_tracks 4 and 2)
#   bash bench/gpu_suite.sh tp4 OUT_DIR [PARTS]   # 4 GPUs: tp=4 (n_tracks 4: one track per GPU)
#   bash bench/gpu_suite.sh tp1 OUT_DIR [PARTS]   # 1 GPU: tp=1
#   bash bench/gpu_suite.sh train2 OUT_DIR        # 2 GPUs: bench/train_throughput.py (all groups; then the
#                                                 # compiled-overlap and compiled-graphs modes in OUT_DIR/overlap)
#   bash bench/gpu_suite.sh decode2 OUT_DIR       # 2 GPUs (issue 14): the compiled+graph decode profile,
#                                                 # sample.py tokens/s at tp 1 and 2 (bench/sample_decode.py),
#                                                 # the CUDA-only tests, batch-8 rows with and without cuDNN SDPA
#   bash bench/gpu_suite.sh decode2b OUT_DIR [CMODE]   # 2 GPUs (issue 14): decode compiled with a non-default
#                                                 # COMPILE_MODES entry (coordinate-descent, the default, or
#                                                 # max-autotune-no-cudagraphs), side by side with the
#                                                 # default: tp_latency decode_b1, sample.py at tp=2; profile
#   bash bench/gpu_suite.sh decode4 OUT_DIR       # 4 GPUs (issue 14 at tp=4, one track per GPU): tp_latency
#                                                 # decode_b1 eager/graph/compiled+graph, its compiled+graph
#                                                 # profile, sample.py tokens/s at tp=4
#   bash bench/gpu_suite.sh gemm1 OUT_DIR         # 1 GPU (issue 14): bench/decode_gemm.py, decode's one-row
#                                                 # GEMMs: cuBLAS vs inductor, max-autotune, a reduction kernel
#   bash bench/gpu_suite.sh check2 OUT_DIR        # 2 GPUs: the inductor collective-fusion repro on NCCL;
#                                                 # bench/compile_check.py, compiled vs eager gradients with
#                                                 # inductor on CUDA, every policy, tp=1 then tp=2; then the
#                                                 # tp=1 miscompile's bisection
#   bash bench/gpu_suite.sh pareto2 OUT_DIR [char384|char192|char768]   # 2 GPUs: issue 15's loss-vs-time timings
#                                                 # (tp2 rows of the char shapes; then python -m experiments.char_sweep.pareto)
#   bash bench/gpu_suite.sh comm4 OUT_DIR PART     # 4 GPUs (sequence parallelism and overlap at tp=4), one PART a
#                                                 # call: floors124m (the strongest baseline and each policy's
#                                                 # fastest mode, with no-sync floors), overlap124m (the baseline
#                                                 # with Megatron's SP overlap, chunked:1, beside SP and the
#                                                 # policies), large (spd beside SP and chunked:1), latency
#                                                 # (tp_latency off/sp, 124m and large), chunkprof (a profile of
#                                                 # the chunked baseline)
#   bash bench/gpu_suite.sh comm2 OUT_DIR [SIZE]  # tp=2, plain TP and TP + SP, 124m with floors, medium without:
#                                                 # 4 GPUs as two pairs at once (GPUs 0,1: 124m; 2,3: medium), or
#                                                 # SIZE (124m, medium or large) alone on GPUs 0,1 of a 2-GPU machine;
#                                                 # async124m: plain TP with and without --tp_async_grad, 124m;
#                                                 # asyncprof: baseline and grouped:4, both with inductor's
#                                                 # peak-memory reordering off, profiled; asynclarge: at large;
#                                                 # large2: large's parallel and spd beside plain TP (what one
#                                                 # call's limit left of large)
# PARTS is a comma-separated subset of latency124m, latencymedium, profiles, syncfreq (syncfreq: tp1
# only); default all. Set BENCH_COMMIT to the commit being measured: the results record it.
# Then, here: copy OUT_DIR's files into bench/results/ and run `python -m bench.tp_latency --merge`.
# Each step has a time limit, so one that hangs or runs long costs only its own rows (the benchmark
# saves its rows after every model). GPU_SUITE_DRY=1 prints each step (limit, name, command) and runs
# nothing (tests/test_gpu_suite.py checks every mode that way).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
modes="tp1, tp2, tp4, train2, decode2, decode2b, decode4, gemm1, check2, pareto2, comm4, comm2"
usage="usage: bash bench/gpu_suite.sh MODE OUT_DIR [PARTS]; MODE is one of $modes (this file's header says what each runs)"
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then echo "$usage"; exit 0; fi
if [ $# -lt 2 ]; then echo "$usage" >&2; exit 2; fi
mode=$1
out=$2
parts=${3:-latency124m,latencymedium,profiles,syncfreq}
mkdir -p "$out"
[ -n "${GPU_SUITE_DRY:-}" ] || nvidia-smi -L | tee -a "$out/suite.log"
small="baseline;ladder;spd;parallel;selective:m0-3,m5,m7,m9-11;grouped:2;grouped:3;grouped:4;grouped:6"
medium="baseline;ladder;spd;parallel;grouped:3;grouped:6"
step() {  # step SECONDS NAME CMD...: run CMD with a time limit, log to $out/NAME.log
  local limit=$1 name=$2
  shift 2
  if [ -n "${GPU_SUITE_DRY:-}" ]; then
    echo "step $limit $name ${CUDA_VISIBLE_DEVICES:+CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES }$*"
    return
  fi
  echo "== $name: $*" | tee -a "$out/suite.log"
  timeout "$limit" "$@" > "$out/$name.log" 2>&1
  echo "== $name: rc $? at ${SECONDS}s" | tee -a "$out/suite.log"
}
has() { [[ ",$parts," == *",$1,"* ]]; }
case $mode in
  tp1) launch=(python); tracks="4" ;;
  tp2) launch=(torchrun --standalone --nproc_per_node=2); tracks="4,2" ;;
  tp4) launch=(torchrun --standalone --nproc_per_node=4); tracks="4" ;;
  train2) launch=(torchrun --standalone --nproc_per_node=2); parts=train ;;
  decode2) launch=(torchrun --standalone --nproc_per_node=2); parts=decode ;;
  decode2b) launch=(torchrun --standalone --nproc_per_node=2); cmode=${3:-coordinate-descent}; parts=decodeb ;;
  gemm1) launch=(python); parts=gemm ;;
  decode4) launch=(torchrun --standalone --nproc_per_node=4); parts=decode4 ;;
  check2) launch=(torchrun --standalone --nproc_per_node=2); parts=check ;;
  pareto2) launch=(torchrun --standalone --nproc_per_node=2); charsize=${3:-char384}; parts=pareto ;;
  comm4) launch=(torchrun --standalone --nproc_per_node=4); parts=${3:-floors124m} ;;
  comm2) launch=(torchrun --standalone --nproc_per_node=2); parts=comm2; comm2_sizes=${3:-124m,medium}
    case $comm2_sizes in 124m|medium|large|large2|async124m|asyncprof|asynclarge|124m,medium) ;; *)
      echo "gpu_suite.sh: comm2 size '$comm2_sizes' is not one of 124m, medium, large, large2, async124m, asyncprof, asynclarge (default: 124m and medium, on 4 GPUs)" >&2
      exit 2 ;; esac ;;
  *) echo "gpu_suite.sh: mode '$mode' is not one of $modes" >&2
     exit 2 ;;
esac
comm=(-m bench.train_throughput --variants tp2 --modes compiled-graphs --tp_comm off)
comm4_step() {  # comm4_step NAME PART ARGS...: one tp=4 invocation at n_tracks 4 (one track a GPU), into $out/PART
  local name=$1 part=$2
  shift 2
  step 560 "$name" "${launch[@]}" "${comm[@]}" "$@" --tp2_n_tracks 4 --out_dir "$out/$part"
}
four=baseline,grouped:4,parallel,spd
# 8 compiled rows of about 30 s each on a fresh machine
has floors124m && comm4_step comm_floors_124m floors124m --baseline_tp_comm sp --policies $four --warmup 10 --iters 30 --floors
# chunked:1 is Megatron's SP overlap: each gathered GEMM's input-gradient reduce-scatter travels during its
# weight-gradient GEMM, nothing split (parallel/overlap.py); 5 rows of about 40 s
has overlap124m && comm4_step comm_overlap_124m overlap124m --baseline_tp_comm sp,chunked:1 --policies $four --warmup 10 --iters 30
# 3 rows of 36 layers: 80-160 s of compile each on a fresh machine (parallel's and grouped:4's rows are in
# bench/results/tp4_comm_h200/, invocations 6-7)
has large && comm4_step comm_large large --baseline_tp_comm sp,chunked:1 --size large --policies baseline,spd --warmup 8 --iters 20
if has latency; then
  step 560 comm_latency "${launch[@]}" -m bench.tp_latency --sizes 124m,large --n_tracks 4 \
    --policies "baseline;grouped:4;parallel;spd" --tp_comm off,sp --modes graph --warmup 5 --repeats 30 \
    --out_dir "$out/latency"
fi
if has chunkprof; then
  step 300 comm_chunked_profile "${launch[@]}" -m bench.train_throughput --variants tp2 --modes compiled-graphs \
    --policies baseline --tp2_n_tracks 4 --tp_comm sp,chunked --warmup 10 --iters 30 --profile baseline \
    --out_dir "$out/chunkprof"
fi
if has comm2; then  # each ratio is taken inside its own invocation; baseline in plain TP and TP + SP, the policies
  # in plain TP (their fastest at tp=4); 124m with floors (10 rows of about 30 s of compile), medium without (5 rows
  # of about 60 s). Both sizes: two invocations at once, one per pair of GPUs
  second_pair=0,1; [ "$comm2_sizes" = 124m,medium ] && second_pair=2,3
  four=baseline,grouped:4,parallel,spd
  comm2_step() {  # comm2_step NAME GPUS SIZE POLICIES ARGS...: one invocation on a pair of GPUs, at n_tracks 2
    local name=$1 gpus=$2 size=$3 policies=$4
    shift 4
    CUDA_VISIBLE_DEVICES=$gpus step 560 "comm2_$name" "${launch[@]}" "${comm[@]}" --size "$size" \
      --policies "$policies" --tp2_n_tracks 2 "$@" --out_dir "$out/comm2_$name" &
  }
  [[ ,$comm2_sizes, == *,124m,* ]] && comm2_step 124m 0,1 124m $four --baseline_tp_comm off,sp --warmup 10 --iters 30 --floors
  [[ ,$comm2_sizes, == *,medium,* ]] && comm2_step medium "$second_pair" medium $four --baseline_tp_comm off,sp --warmup 10 --iters 30
  # large alone: 5 rows of 36 layers, 80-160 s of compile each on a fresh machine, so the limit may cut the last
  # (the bench saves its rows after every model: the baseline's two modes first, then grouped:4, parallel, spd)
  [[ $comm2_sizes == large ]] && comm2_step large 0,1 large $four --baseline_tp_comm off,sp --warmup 8 --iters 20
  # on 2x H200 that limit cut large after 3 rows (bench/results/tp2_comm_h200/invocation3_large_partial.*): the other
  # two policies beside the baseline in plain TP, its faster mode there, in a call of their own
  [[ $comm2_sizes == large2 ]] && comm2_step large2 0,1 large baseline,parallel,spd --warmup 8 --iters 20
  # plain TP with Megatron's async input-gradient all-reduce (dX's all-reduce during dW), the plain-TP baseline a
  # Megatron user runs without SP, beside plain TP; the policies too (their best mode may use it): 8 rows of ~35 s
  [[ $comm2_sizes == async124m ]] && comm2_step async124m 0,1 124m $four --tp_async_grad off,on --warmup 10 --iters 30
  # on 2x H200 the async rows came out 0.5-2.6% slower than plain TP (bench/results/tp2_comm_h200/invocation4_*),
  # grouped:4's too, which has 3 of them a step: was it the async all-reduce, or inductor's peak-memory reordering,
  # which the async rows turn off? Here every row has it off, and a torch.profiler trace of each says whether the
  # all-reduce overlaps its dW GEMM (4 rows of ~40 s, 3 profiled iterations each); then the pair at large, where
  # each dX is 1.7x the bytes
  [[ $comm2_sizes == asyncprof ]] && comm2_step asyncprof 0,1 124m baseline,grouped:4 --tp_async_grad off,on \
    --peak_memory_reorder off --warmup 10 --iters 30 --profile tp2
  [[ $comm2_sizes == asynclarge ]] && comm2_step asynclarge 0,1 large baseline --tp_async_grad off,on --warmup 8 --iters 20
  wait
fi
if has train; then
  step 380 train_throughput "${launch[@]}" -m bench.train_throughput --warmup 10 --iters 30 \
    --policies "baseline;spd;parallel;ladder;grouped:2;grouped:4;grouped:6" --tp2_n_tracks 2,4 \
    --profile "tp2 n2 baseline compiled" --out_dir "$out"
  step 190 train_overlap "${launch[@]}" -m bench.train_throughput --warmup 10 --iters 30 --variants tp1,tp2 \
    --modes compiled,compiled-overlap,compiled-graphs --policies "baseline;grouped:4" --tp2_n_tracks 2 \
    --tp1_policies baseline --out_dir "$out/overlap"
fi
if has pareto; then  # 14 compiled variants (7 policies x n_tracks 2, 6): about 20-30 s of compile each
  step 560 "pareto_$charsize" "${launch[@]}" -m bench.train_throughput --size "$charsize" --batch_size 64 \
    --variants tp2 --tp2_n_tracks 2,6 --modes compiled-graphs --warmup 10 --iters 30 \
    --policies "baseline;spd;parallel;ladder;grouped:2;grouped:3;grouped:6" --out_dir "$out"
fi
if has check; then
  # does inductor on CUDA also run a reader of an all-reduce's result before it (it does on CPU, section 1d)?
  step 40 repro_collective_fusion "${launch[@]}" -m experiments.compiler_repros.collective_fusion.repro --cuda
  CUDA_VISIBLE_DEVICES=0 step 140 compile_check_tp1 python -m bench.compile_check --out_dir "$out"
  step 200 compile_check_tp2 "${launch[@]}" -m bench.compile_check --out_dir "$out"
  # which part of the old tp=1 construction inductor miscompiled (section 1c); 5 compiles of the char-384 model
  CUDA_VISIBLE_DEVICES=0 step 130 bisect_partial_grads python -m experiments.compiler_repros.partial_grads.bisect_partial_grads \
    --variants cat_f,cat_split,cat_clone_fn,per_param_f,coalesced_f --policies grouped:2 --out_dir "$out"
  # the candidate replacement at tp=2, where the model still uses cat + f (compile_check_tp2 above)
  step 90 bisect_partial_grads_tp2 "${launch[@]}" -m experiments.compiler_repros.partial_grads.bisect_partial_grads \
    --variants coalesced_f --policies grouped:2 --out_dir "$out"
fi
if has decode; then  # every (policy, floor, workload) compiles once: the steps' limits keep the call under 10 min
  mkdir -p "$out/decode" "$out/sample" "$out/batch8" "$out/batch8_no_cudnn"
  step 90 profile_decode_compiled_graph "${launch[@]}" -m bench.profile_policy --n_tracks 2 --workload decode_b1 \
    --mode compiled+graph --policies "baseline;grouped:3" --torch_tp --calls 50 --out_dir "$out/decode"
  step 200 sample_decode python -m bench.sample_decode --nprocs 1,2 --modes eager,graph --policies baseline \
    --n_tracks 2 --max_new_tokens 500 --num_samples 3 --check_tokens 48 --out_dir "$out/sample"
  CUDA_VISIBLE_DEVICES=0 step 60 cuda_tests python -m pytest -q -p no:cacheprovider tests/test_decode.py \
    tests/test_no_host_sync.py -k cuda
  # the batch-8 step died in a graph replay (illegal memory access): once as it was, once off cuDNN attention
  step 90 latency_batch8 "${launch[@]}" -m bench.tp_latency --sizes 124m --n_tracks 2 \
    --policies "baseline;grouped:3" --workloads decode_b8,prefill_b8 --modes graph,compiled+graph \
    --warmup 5 --repeats 30 --out_dir "$out/batch8"
  step 90 latency_batch8_no_cudnn "${launch[@]}" -m bench.tp_latency --sizes 124m --n_tracks 2 \
    --policies "baseline;grouped:3" --workloads decode_b8,prefill_b8 --modes graph,compiled+graph --no_cudnn_sdpa \
    --warmup 5 --repeats 30 --out_dir "$out/batch8_no_cudnn"
fi
if has decode4; then
  mkdir -p "$out/decode4" "$out/sample4"
  step 270 latency_decode_tp4 "${launch[@]}" -m bench.tp_latency --sizes 124m --n_tracks 4 \
    --policies "baseline;grouped:3;ladder;parallel" --workloads decode_b1 --modes eager,graph,compiled+graph \
    --warmup 5 --repeats 30 --out_dir "$out/decode4"
  step 90 profile_decode_tp4 "${launch[@]}" -m bench.profile_policy --n_tracks 4 --workload decode_b1 \
    --mode compiled+graph --policies "baseline;grouped:3" --torch_tp --calls 50 --out_dir "$out/decode4"
  step 200 sample_decode_tp4 python -m bench.sample_decode --nprocs 4 --modes eager,graph --policies baseline \
    --n_tracks 4 --max_new_tokens 500 --num_samples 3 --check_tokens 48 --out_dir "$out/sample4"
fi
if has gemm; then  # 10 shapes x 4 compiled variants; max-autotune benchmarks each shape's GEMM templates
  step 500 decode_gemm python -m bench.decode_gemm --tps 2 --rows 1,8 --out_dir "$out"
fi
if has decodeb; then  # worth its call only if gemm1 shows the mode's GEMMs beating cuBLAS. GPT-2 with its
  # biases: coordinate-descent splits a one-row addmm into mm + bias before inductor rewrites the mm
  mkdir -p "$out/$cmode"
  step 300 "latency_decode_$cmode" "${launch[@]}" -m bench.tp_latency --sizes 124m --n_tracks 2 \
    --policies "baseline;grouped:3;ladder;parallel" --workloads decode_b1 --modes compiled+graph \
    --compile_mode "default,$cmode" --warmup 5 --repeats 30 --out_dir "$out/$cmode"
  step 100 "profile_decode_$cmode" "${launch[@]}" -m bench.profile_policy --n_tracks 2 --workload decode_b1 \
    --mode compiled+graph --compile_mode "$cmode" --policies "baseline;grouped:3" --calls 50 \
    --out_dir "$out/$cmode"
  step 160 "sample_decode_$cmode" python -m bench.sample_decode --nprocs 2 --modes graph \
    --compile_modes "default,$cmode" --policies baseline --n_tracks 2 --max_new_tokens 500 --num_samples 3 \
    --out_dir "$out/$cmode"
fi
if has latency124m; then
  step 330 latency_124m "${launch[@]}" -m bench.tp_latency --sizes 124m --n_tracks $tracks \
    --policies "$small" --warmup 5 --repeats 30 --out_dir "$out"
fi
if has latencymedium; then
  mkdir -p "$out/medium"
  step 270 latency_medium "${launch[@]}" -m bench.tp_latency --sizes medium --n_tracks $tracks \
    --policies "$medium" --warmup 5 --repeats 30 --out_dir "$out/medium"
fi
if has profiles; then
  for n in ${tracks//,/ }; do
    step 60 profile_decode_b1_n$n "${launch[@]}" -m bench.profile_policy --n_tracks $n --workload decode_b1 \
      --mode graph --policies "baseline;grouped:3;ladder;parallel" --torch_tp --out_dir "$out"
    step 60 profile_prefill_b8_n$n "${launch[@]}" -m bench.profile_policy --n_tracks $n --workload prefill_b8 \
      --mode graph --policies "baseline;spd;grouped:3;parallel;ladder" --torch_tp --out_dir "$out"
  done
  step 60 profile_prefill_b1_eager "${launch[@]}" -m bench.profile_policy --workload prefill_b1 --mode eager \
    --policies "baseline;grouped:3" --torch_tp --out_dir "$out"
fi
if has syncfreq && [ "$mode" = tp1 ]; then
  step 240 sync_frequency python -m bench.sync_frequency --device cuda --out_dir "$out"
fi
