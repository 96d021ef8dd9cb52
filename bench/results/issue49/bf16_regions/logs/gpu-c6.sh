#!/bin/bash
mkdir -p /tmp/res; setsid nohup bash .gpu/s6.sh > /tmp/res/master.log 2>&1 < /dev/null &
end=$(( $(date +%s) + ${1:-560} ))
while [ ! -f /tmp/res/DONE ] && [ $(date +%s) -lt $end ]; do sleep 5; done
cat /tmp/res/master.log
for f in /tmp/res/*/*/*.md; do echo "-- $f"; grep -E "^###|^\| [0-9-]" $f | head -40; done
for f in /tmp/res/logs/*.log; do echo "-- $f"; tail -2 $f | cut -c1-250; done
cd /tmp/res && tar czf $OUT/all.tgz --exclude='*.part' . ; ls -la $OUT
