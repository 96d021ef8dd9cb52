#!/bin/bash
# first call: start .gpu/s29.sh detached and watch; later calls: bash .gpu/w29.sh 570
mkdir -p /tmp/res; setsid nohup bash .gpu/s29.sh > /tmp/res/master.log 2>&1 < /dev/null &
bash .gpu/w29.sh ${1:-560}
