#!/bin/bash
# first call: start .gpu/s41.sh detached and watch; later calls: bash .gpu/w41.sh 570
mkdir -p /tmp/res; setsid nohup bash .gpu/s41.sh > /tmp/res/master.log 2>&1 < /dev/null &
bash .gpu/w41.sh ${1:-560}
