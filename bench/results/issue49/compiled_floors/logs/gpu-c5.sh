#!/bin/bash
# first call: start .gpu/s5.sh detached and watch; later calls: bash .gpu/w5.sh 570 [pack]
mkdir -p /tmp/res; setsid nohup bash .gpu/s5.sh > /tmp/res/master.log 2>&1 < /dev/null &
bash .gpu/w5.sh ${1:-560} $2
