#!/bin/bash
# e2e-hostile.sh: the quick end-to-end test (e2e.sh, our target, less data) and then the
# differential suite (hostile.sh) in one boot of the current-host guest (test-all shares
# the boot; each script cleans up after itself).
set -euo pipefail
TARGET=own E2E_QUICK=1 FIO_RUNTIME=${FIO_RUNTIME:-3} bash integration/guest/e2e.sh
bash integration/guest/hostile.sh
