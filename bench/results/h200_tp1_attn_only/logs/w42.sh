#!/bin/bash
end=$(( $(date +%s) + ${1:-560} ))
while [ ! -f /tmp/res/DONE ] && [ $(date +%s) -lt $end ]; do sleep 3; done
cat /tmp/res/master.log
for f in /tmp/res/logs/*.log; do echo "-- $f"; grep -iE "Error|Traceback" $f | head -3; tail -1 $f | cut -c1-200; done
cd /tmp/res && tar czf $OUT/all.tgz --exclude='*.part' . ; ls -la $OUT
