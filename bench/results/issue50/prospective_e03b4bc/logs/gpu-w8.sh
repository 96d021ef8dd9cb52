#!/bin/bash
end=$(( $(date +%s) + ${1:-560} ))
while [ ! -f /tmp/res/DONE ] && [ $(date +%s) -lt $end ]; do sleep 5; done
cat /tmp/res/master.log
for d in /tmp/res/t*/; do for f in $d*.md; do [ -f $f ] && { echo "-- $f"; grep -E "^###|floor|baseline|spd|grouped" $f | head -60; }; done; done
for f in /tmp/res/logs/*.log; do echo "-- $f"; tail -3 $f | cut -c1-300; done
cd /tmp/res && tar czf $OUT/all.tgz --exclude='*.part' . ; ls -la $OUT
