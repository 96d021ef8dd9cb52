#!/bin/bash
end=$(( $(date +%s) + ${1:-560} ))
while [ ! -f /tmp/res/DONE ] && [ $(date +%s) -lt $end ]; do sleep 5; done
cat /tmp/res/master.log
for f in /tmp/res/tt_*/train_throughput.md; do echo "-- $f"; grep -E "ladder|baseline|async" $f | head -12 | cut -c1-220; done
grep -h "timeline" /tmp/res/tt_*/train_profile_* 2>/dev/null
for f in /tmp/res/logs/*.log; do echo "-- $f"; grep -iE "Error|Traceback" $f | head -3; done
cd /tmp/res && tar czf $OUT/all.tgz --exclude='*.part' . ; ls -la $OUT
