#!/bin/bash
# first call: start .gpu/s18.sh detached and watch; later calls: bash .gpu/w18.sh 570
mkdir -p /tmp/res; setsid nohup bash .gpu/s18.sh > /tmp/res/master.log 2>&1 < /dev/null &
bash .gpu/w18.sh ${1:-560}
