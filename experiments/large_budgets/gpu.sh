#!/bin/bash
# The budget study's device calls (issue 68), one verb per call, on a machine of 1, 2 or 4 GPUs held across calls:
#   bash experiments/large_budgets/gpu.sh stage N          # verify the carried .stage/ chunks; train.bin once all N are in
#                                                          # (here, before call K: python -m data.debian_large.stage
#                                                          # group --from .stage_all --chunks N --index K --out .stage)
#   bash experiments/large_budgets/gpu.sh prefix N         # a data root of its own whose train.bin is chunks 0 .. N-1
#                                                          # ($S/data<N>), so that two widths' prefixes train at once
#   bash experiments/large_budgets/gpu.sh probe WIDTH      # each policy for 96 iterations: tokens/s, and inductor's cache warm
#   bash experiments/large_budgets/gpu.sh branchcheck WIDTH  # a trunk's branch in its process against one in its own
#   bash experiments/large_budgets/gpu.sh start WIDTH ARGS # a sweep in the background (setsid: it outlives the call);
#                                                          # START_WAIT=0 to start a second one in the same call
#   bash experiments/large_budgets/gpu.sh watch SECONDS    # its progress until it ends or SECONDS pass
#   bash experiments/large_budgets/gpu.sh collect [SECONDS]  # wait for it (or stop it), then pack the runs' logs into $OUT
# HOLD=SECONDS (the device's budget_left_s before this call, less ~45 s for the gaps between the calls to come): the
# sweep starts only the runs expected to end by then (experiments/run_time.py; a run cut at the hold is lost, its
# checkpoints on the machine), on each GPU the chains that fill the hold best (experiments/hold.py's hold_plan: a
# kept chain runs on its GPU only). AFTER=1 queues a start
# behind the sweeps running now, and HOLD=rest gives it what is left of the first start's hold when it begins: e.g.
# width 256's schedule-check runs in the time width 768's chains leave (gpu.sh prefix 15 first, then PREFIX=15).
# ARGS go to python -m experiments.docs_study.run run (--schedule, --budgets, --policies, --seeds, --jobs; GPUS=1 puts
# the sweep on GPU 1 alone; PREFIX=N reads $S/data<N> instead of data/; SWEEP=<folder> keeps a side check's runs,
# e.g. another learning rate, out of w<width>/, whose runs report.py reads as the sweep's). watch and collect wait
# for every sweep started on the machine. start adds data_order=one_pass, 1 x 32 sequences an iteration,
# checkpoint_every=4 (a 124M checkpoint costs 1.7 s: w768/calls/checkpoint_probe/), --branches-in-trunk (a WSD trunk's
# process trains its branches: no start and compile per branch) and log_layer_grad_norms (where
# an unsteady run's gradient spikes; logging only, so runs stored without it still count: runner.IGNORED_KEYS). Everything the machine keeps
# between calls is under /root/study (STUDY_DIR: scratch, logs) and data/debian_large (the staged corpus).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
cd "$(dirname "$0")/../.."
S=${STUDY_DIR:-/root/study}; mkdir -p $S; OUT=${OUT:-$S/out}; mkdir -p $OUT
# SCRATCH names where the runs write (default $S/scratch; /dev/shm/scratch keeps the 1.5 GB checkpoints of 124M runs
# in memory, which did not shorten them: w768/calls/README.md)
# (the first call that sets it names it for the machine's later calls: collect packs the logs from there)
[ -z "$SCRATCH" ] && [ -f $S/scratch.path ] && SCRATCH=$(cat $S/scratch.path); SCRATCH=${SCRATCH:-$S/scratch}; echo $SCRATCH > $S/scratch.path
T0=$(date +%s)
log() { echo "== $* $(date +%T) (+$(( $(date +%s) - T0 )) s)"; }
alive() { for pid in $(cat $S/sweeps.pid 2>/dev/null); do kill -0 "$pid" 2>/dev/null && return 0; done; return 1; }
verb=$1; shift
log "$verb $*: $(nvidia-smi --query-gpu=name --format=csv,noheader | sort | uniq -c | tr -s ' ' | tr '\n' ';') load $(cut -d' ' -f1-3 /proc/loadavg)"
case $verb in
  stage)
    python3 -m data.debian_large.stage unpack --from .stage --chunks "$1" 2>&1 | tee -a $S/stage.log
    ls -la data/debian_large/ | tee -a $S/stage.log; cp $S/stage.log $OUT/ ;;
  prefix)
    # train.bin's file size sets one_pass's order, so each width keeps the prefix it was planned on (config/large_*.py)
    n=$1; D=$S/data$n/debian_large; mkdir -p $D
    for k in $(seq 0 $((n - 1))); do f=data/debian_large/chunks/$(printf %03d $k).bin
      [ -f $f ] || { echo "error: chunk $k is not staged yet ($f); stage it first" >&2; exit 2; }; done
    [ -f $D/train.bin ] && [ "$(stat -c %s $D/train.bin)" = "$((n * 33554432))" ] || {
      cat $(for k in $(seq 0 $((n - 1))); do printf "data/debian_large/chunks/%03d.bin " $k; done) > $D/train.bin.tmp &&
      mv $D/train.bin.tmp $D/train.bin; }
    for v in val val_prose val_code; do ln -f data/debian_large/$v.bin $D/$v.bin; done
    ls -la $D | tee -a $S/stage.log ;;
  probe)
    width=$1; P=""; i=0; D=$S/probe_data/debian_large; mkdir -p $D; n_gpus=$(nvidia-smi -L | wc -l)
    # the chunks carried so far stand in for train.bin (the probe reads 96 x 32 windows)
    [ -f $D/train.bin ] || cat data/debian_large/chunks/*.bin > $D/train.bin; cp data/debian_large/val*.bin $D/
    for policy in baseline spd parallel ladder grouped:4 grouped:12; do
      tag=${policy/:/}
      CUDA_VISIBLE_DEVICES=$((i % n_gpus)) timeout 500 python3 train_reduced_sync.py config/large_w$width.py --sync_policy=$policy \
        --max_iters=96 --lr_decay_iters=96 --eval_interval=96 --log_interval=8 --tp=1 --gradient_accumulation_steps=1 --batch_size=32 \
        --always_save_checkpoint=False --keep_best=False --data_dir=$S/probe_data --out_dir=$S/probe/$width-$tag > $S/probe-$width-$tag.log 2>&1 & P="$P $!"
      i=$((i + 1))
    done
    wait $P; log "probe done"
    for f in $S/probe-$width-*.log; do echo "-- $f"; grep -E "^iter (64|72|80|88|96)|error|Error" $f | tail -4; done
    (cd $S && tar czf $OUT/probe-$width.tgz probe-$width-*.log) ;;
  branchcheck)
    # a short WSD trunk whose process trains its branch (--branches, as gpu.sh start's --branches-in-trunk has it
    # do), beside the same branch in a process of its own, on the staged corpus: their losses (equal bit for bit on
    # CPU, tests/test_budgets.py) and what the own process's start and compile cost (2-3 minutes at width 256)
    # (trainer overrides after WIDTH go to both runs: a tiny model on CPU, tests/test_budgets.py)
    width=${1:-256}; shift; cfg=config/large_w$width.py; [ "$width" = 768 ] && cfg=config/large_124m.py
    D=$S/branchcheck-$width; rm -rf $D; mkdir -p $D
    common="$cfg --tp=1 --lr_schedule=wsd --data_order=one_pass --batch_size=32 --gradient_accumulation_steps=1
      --always_save_checkpoint=True --keep_best=False --warmup_iters=16 --eval_interval=40 --log_interval=8 $*"
    t0=$(date +%s.%N)
    python3 train_reduced_sync.py $common --max_iters=160 --lr_decay_iters=200 --save_iters=160 \
      --branches=200:$D/inline --out_dir=$D/trunk > $D/trunk.out 2>&1 || { tail -20 $D/trunk.out; exit 1; }
    t1=$(date +%s.%N)
    python3 train_reduced_sync.py $common --max_iters=200 --lr_decay_iters=200 --init_from=branch \
      --branch_from=$D/trunk/ckpt_160.pt --out_dir=$D/own > $D/own.out 2>&1 || { tail -20 $D/own.out; exit 1; }
    t2=$(date +%s.%N)
    python3 -m experiments.large_budgets.branch_check $D "$t0" "$t1" "$t2" | tee $OUT/branchcheck-$width.txt
    cp $D/trunk.out $D/own.out $OUT/ ;;
  start)
    # HOLD=N also writes the machine's deadline (now + N); HOLD=rest reads it back for a later sweep of the same hold
    if [ "$HOLD" = rest ]; then
      [ -f $S/deadline ] || { echo "error: HOLD=rest: no earlier start set a deadline ($S/deadline); give HOLD=SECONDS" >&2; exit 2; }
    elif [ -n "$HOLD" ]; then
      [[ "$HOLD" =~ ^[1-9][0-9]*$ ]] || { echo "error: HOLD=$HOLD: give whole seconds > 0, or rest" >&2; exit 2; }
      [ -z "$AFTER" ] || { echo "error: AFTER=1 with HOLD=$HOLD: a queued start takes HOLD=rest (the first start's hold) or none" >&2; exit 2; }
    fi
    if [ -n "$AFTER" ]; then
      # queued behind the sweeps running now: a process of its own, listed in sweeps.pid so that watch and collect
      # wait for it (or stop it), that starts this sweep once they end (HOLD=rest: with the hold they left)
      before=$(cat $S/sweeps.pid 2>/dev/null | tr '\n' ' ')
      setsid nohup env AFTER= WAIT_FOR="$before" START_WAIT=0 bash "$0" start "$@" >> $S/after-$$.log 2>&1 < /dev/null &
      echo $! >> $S/sweeps.pid; log "queued behind sweeps $before(log: $S/after-$$.log)"; exit 0
    fi
    for pid in $WAIT_FOR; do while kill -0 "$pid" 2>/dev/null; do sleep 5; done; done
    if [ "$HOLD" = rest ]; then
      HOLD=$(( $(cat $S/deadline) - $(date +%s) ))
      [ "$HOLD" -gt 60 ] || { log "not started: $HOLD s of the hold left"; exit 0; }
      log "the hold's rest: $HOLD s"
    elif [ -n "$HOLD" ]; then
      echo $(( $(date +%s) + HOLD )) > $S/deadline
    fi
    width=$1; shift; cfg=config/large_w$width.py; [ "$width" = 768 ] && cfg=config/large_124m.py
    # the sampler in its own session, as the sweep: started plainly, it ended with the call that started it
    [ -f $S/smi.pid ] && kill -0 "$(cat $S/smi.pid)" 2>/dev/null || {
      setsid nohup nvidia-smi --query-gpu=index,memory.used,utilization.gpu --format=csv -l 30 > $S/smi-$width.csv \
        2>&1 < /dev/null & echo $! > $S/smi.pid; }
    # GPUS, when set, narrows the sweep to those GPUs (the runner then spreads its runs over what it sees); one job a
    # GPU unless ARGS say --jobs (a second run on a GPU did not add tokens per second: w256/calls/README.md)
    n_gpus=$(nvidia-smi -L | wc -l); [ -n "$GPUS" ] && n_gpus=$(echo "$GPUS" | tr ',' '\n' | wc -l)
    setsid nohup env ${GPUS:+CUDA_VISIBLE_DEVICES=$GPUS} python3 -m experiments.docs_study.run run --config $cfg \
      --sweep ${SWEEP:-experiments/large_budgets/w$width} --jobs $n_gpus --scratch $SCRATCH --status-every 120 \
      --set data_order=one_pass --set gradient_accumulation_steps=1 --set batch_size=32 --set checkpoint_every=4 --set log_layer_grad_norms=True ${PREFIX:+--set data_dir=$S/data$PREFIX} ${HOLD:+--hold $HOLD} --branches-in-trunk "$@" >> $S/sweep-$width-$$.log 2>&1 < /dev/null &
    echo $! >> $S/sweeps.pid; sleep "${START_WAIT:-180}"; tail -n 30 $S/sweep-$width-$$.log ;;
  watch)
    end=$(( $(date +%s) + $1 ))
    while alive && [ "$(date +%s)" -lt $end ]; do sleep 10; done
    for f in $S/sweep-*.log; do echo "-- $f"; tail -n 25 $f; done; cp $S/sweep-*.log $S/smi-*.csv $OUT/ 2>/dev/null ;;
  collect)
    # wait for the sweep (at most $1 seconds when given), then stop what is left of it: its runs resume from their
    # last eval's checkpoint only on this machine, so a later session trains them again
    end=$(( $(date +%s) + ${1:-100000} ))
    while alive && [ "$(date +%s)" -lt $end ]; do sleep 5; done
    for pid in $(cat $S/sweeps.pid 2>/dev/null); do kill -- -"$pid" 2>/dev/null && log "sweep $pid stopped" || log "sweep $pid ended"; done
    # each run's three logs (checkpoints stay behind), and the stdout of any run that did not finish
    (cd $SCRATCH && find . \( -name config.json -o -name log.txt -o -name metrics.jsonl -o -name "*.out" -o -name SWEEP_DIR \) -print \
      | tar czf $OUT/scratch-logs.tgz -T -)
    cp $S/sweep-*.log $S/smi-*.csv $S/stage.log $OUT/ 2>/dev/null; ls -la $OUT ;;
  *) echo "error: unknown verb '$verb'; allowed: stage, prefix, probe, branchcheck, start, watch, collect" >&2; exit 2 ;;
esac
log "$verb done"
