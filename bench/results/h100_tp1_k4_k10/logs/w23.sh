#!/bin/bash
end=$(( $(date +%s) + ${1:-560} ))
while [ ! -f /tmp/res/DONE ] && [ $(date +%s) -lt $end ]; do sleep 3; done
cat /tmp/res/master.log
for f in /tmp/res/t_*/*.md; do [ -f $f ] && { echo "-- $f"; grep -E "graph" $f | head -8 | cut -c1-200; }; done
for f in /tmp/res/logs/*.log; do echo "-- $f"; tail -2 $f | cut -c1-300; done
cd /tmp/res && tar czf $OUT/all.tgz --exclude='*.part' . ; ls -la $OUT
