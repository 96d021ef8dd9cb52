#!/bin/bash
# watch the master until $1 s have passed in this call; pack with $2=pack (or when DONE)
end=$(( $(date +%s) + ${1:-560} ))
while [ ! -f /tmp/res/DONE ] && [ $(date +%s) -lt $end ]; do sleep 10; done
cat /tmp/res/master.log; for f in /tmp/res/logs/sweep_*.log; do echo "-- $f"; grep -c "complete" $f; tail -2 $f | cut -c1-200; done 2>/dev/null
for f in /tmp/res/logs/cc_tp2.log; do [ -f $f ] && { echo "-- $f"; grep -E "PASS|FAIL" $f | tail -10; }; done
grep -h "val loss\|step 30" /tmp/res/logs/launch_*.log 2>/dev/null | tail -4
for f in /tmp/res/tt/*.md /tmp/res/ar/*.md; do [ -f $f ] && { echo "-- $f"; head -40 $f; }; done
if [ -f /tmp/res/DONE ] || [ "$2" = pack ]; then cd /tmp/res && tar czf $OUT/all.tgz --exclude='*.part' . ; ls -la $OUT; fi
