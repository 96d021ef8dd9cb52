#!/bin/bash
# session of 2026-11-26 (tenth), call 2, on the 2x H200 the lender gave call 1: let s29's tt1_124m finish, stop s29
# there (tt1_medium and tt_large_n4 not run), then run the pre-registered H200 script s24.sh (committed in the
# ninth session, bench/results/allreduce/instep_h100/logs/s24.sh) as s30.sh, its output under /tmp/res/h200.
end=$(( $(date +%s) + 240 ))
while ! grep -q "tt1_124m rc" /tmp/res/master.log && [ $(date +%s) -lt $end ]; do sleep 2; done
pkill -f s29.sh; pkill -f bench.train_throughput; sleep 5; cat /tmp/res/master.log
bash .gpu/s30.sh > /tmp/res/h200_master.log 2>&1; cat /tmp/res/h200_master.log
for f in /tmp/res/logs/*.log /tmp/res/h200/logs/*.log; do echo "-- $f"; grep -iE "Error|Traceback" $f | head -3; tail -1 $f | cut -c1-200; done
cd /tmp/res && tar czf $OUT/all.tgz --exclude='*.part' . ; ls -la $OUT
