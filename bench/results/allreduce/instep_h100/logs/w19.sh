#!/bin/bash
end=$(( $(date +%s) + ${1:-560} ))
while [ ! -f /tmp/res/DONE ] && [ $(date +%s) -lt $end ]; do sleep 3; done
cat /tmp/res/master.log
for f in /tmp/res/*/allreduce_*.json; do echo "-- $f"; python3 -c "
import json,sys; d=json.load(open('$f'))
for r in d['rows']:
    if r['bytes'] in (1536,12288,1048576,1572864,2097152,2621440,12582912,16777216,20971520,25165824):
        print(r['bytes'], round(r['us'],2), 'with', [round(v,1) for v in r.get('us_with_ranks',[])], 'floor', [round(v,1) for v in r.get('us_floor_ranks',[])])
"; done
cat /tmp/res/logs/clocks.txt
for f in /tmp/res/logs/*.log; do echo "-- $f"; grep -iE "Error|Traceback" $f | head -3; done
cd /tmp/res && tar czf $OUT/all.tgz --exclude='*.part' . ; ls -la $OUT
