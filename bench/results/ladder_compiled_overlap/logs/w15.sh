#!/bin/bash
end=$(( $(date +%s) + ${1:-560} ))
while [ ! -f /tmp/res/DONE ] && [ $(date +%s) -lt $end ]; do sleep 5; done
cat /tmp/res/master.log
for f in /tmp/res/tt_*/train_throughput.md; do echo "-- $f"; grep -E "ladder|baseline" $f | head -6 | cut -c1-220; done
for f in /tmp/res/tt_*/train_profile_*ladder*; do echo "-- $f"; head -12 $f | cut -c1-200; done
for f in /tmp/res/tlc_*/tp_latency_tp2.md; do echo "-- $f"; grep -E "^\| 2 |^###" $f | cut -c1-160; done
for f in /tmp/res/logs/*.log; do echo "-- $f"; grep -iE "Error|Traceback" $f | head -3; tail -1 $f | cut -c1-200; done
cd /tmp/res && tar czf $OUT/all.tgz --exclude='*.part' . ; ls -la $OUT
