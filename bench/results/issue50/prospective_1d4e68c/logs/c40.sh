#!/bin/bash
# first call: start .gpu/s40.sh detached and watch; later calls: bash .gpu/w40.sh 570
mkdir -p /tmp/res; setsid nohup bash .gpu/s40.sh > /tmp/res/master.log 2>&1 < /dev/null &
bash .gpu/w40.sh ${1:-560}
