#!/bin/bash
# first call: start .gpu/s42.sh detached and watch; later calls: bash .gpu/w42.sh 570
mkdir -p /tmp/res; setsid nohup bash .gpu/s42.sh > /tmp/res/master.log 2>&1 < /dev/null &
bash .gpu/w42.sh ${1:-560}
