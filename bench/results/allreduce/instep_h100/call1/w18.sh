#!/bin/bash
end=$(( $(date +%s) + ${1:-560} ))
while [ ! -f /tmp/res/DONE ] && [ $(date +%s) -lt $end ]; do sleep 3; done
cat /tmp/res/master.log
for f in /tmp/res/*/allreduce_*.md; do echo "-- $f"; head -3 $f | cut -c1-300; awk -F'|' 'NR>5 && ($2+0==1536 || $2+0==12288 || $2+0==1048576 || $2+0==1572864 || $2+0==2097152 || $2+0==2621440 || $2+0==12582912 || $2+0==16777216 || $2+0==20971520)' $f; done
for f in /tmp/res/logs/*.log; do echo "-- $f"; grep -iE "Error|Traceback" $f | head -3; done
cd /tmp/res && tar czf $OUT/all.tgz --exclude='*.part' . ; ls -la $OUT
