# call 3 (run inline): wait for the master's cosine runners to stop at their deadline, resume them from their last
# eval on the same machine (same scratch), pack. The size sweeps' finished run dirs under the repository were lost:
# each call copies the working tree again and removed the run dirs that earlier calls had written there.
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site; R=/tmp/res; S=$(date +%s)
while pgrep -f "schedule cosine" >/dev/null && [ $(( $(date +%s)-S )) -lt 330 ]; do sleep 5; done
echo "cosine runners exited at +$(( $(date +%s)-S )) s"; tail -3 $R/logs/sweep_cosA.log $R/logs/sweep_cosB.log | cut -c1-160
DL=$(( 560 - ($(date +%s)-S) ))
for t in A:0:spd B:1:grouped:12; do IFS=: read tag gpu pol g <<< "$t"; [ -n "$g" ] && pol="$pol:$g"
 CUDA_VISIBLE_DEVICES=$gpu python3 -m experiments.docs_study.run run --jobs 3 --deadline $DL --scratch /tmp/scr_cos$tag --pack $R/pack_cos${tag}2 --status-every 60 --config config/docs_124m.py --schedule cosine --budgets 2560 --policies $pol --seeds 1337,1338,1339 > $R/logs/sweep_cos${tag}2.log 2>&1 & done
wait; tail -8 $R/logs/sweep_cos?2.log | cut -c1-160; cat $R/master.log | tail -5
cd $R && tar czf $OUT/all.tgz --exclude='*.part' --exclude='scr_*' . ; ls -la $OUT
