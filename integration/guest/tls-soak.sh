#!/bin/bash
# tls-soak.sh: the TLS suite (tls.sh) and then the hostile soak (soak.sh) in one boot of
# the current-host guest (test-all shares the boot; each script cleans up after itself).
set -euo pipefail
bash integration/guest/tls.sh
bash integration/guest/soak.sh
