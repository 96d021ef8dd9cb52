#!/bin/bash
# first call: start .gpu/s22.sh detached and watch; later calls: bash .gpu/w22.sh 570
mkdir -p /tmp/res; setsid nohup bash .gpu/s22.sh > /tmp/res/master.log 2>&1 < /dev/null &
bash .gpu/w22.sh ${1:-560}
