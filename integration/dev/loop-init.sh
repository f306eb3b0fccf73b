#!/bin/bash
# Developer repro (runs in the guest): initiator.sh against TARGETS N times in one boot.
# Shows each loop's verdict and any perf run that broke (retried), with its context.
for i in $(seq ${N:-4}); do
  echo "##### loop $i"
  bash integration/guest/initiator.sh > /tmp/init.$i.txt 2>&1; rc=$?
  grep -E "FAIL|PASS|NOTE: perf" /tmp/init.$i.txt | tail -5
  grep -B12 -A2 "the queue broke" /tmp/init.$i.txt
  if [ $rc != 0 ]; then grep -B40 -m1 "^FAIL" /tmp/init.$i.txt; echo "--- full dmesg tail"; dmesg | grep -v "speed is unknown" | tail -30; exit 1; fi
done
echo LOOP-DONE
