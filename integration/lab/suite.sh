# suite.sh: sourced by the integration/run-*-tests scripts that boot the lab VM once and
# run one guest script there:
#   run_suite NAME TITLE GUEST_SCRIPT TIMEOUT [ARG...]
# (a) integration/lab/build-image (quick when up to date; as root), (b) cargo build
# --release of the target, the initiator and its examples (skipped when SKIP_BUILD is set
# and the target's binary exists), then the caller's after_build ROOT if it defines one,
# (c) boot
# the lab VM and run GUEST_SCRIPT (relative to the project root), its output also saved to
# integration/out/NAME.log, (d) exit with its status. ARGs: --keep (keep the VM's files),
# -e VAR=VALUE (an environment variable for the guest script), -h (the caller's header).
# Environment: NVMF_LAB_DIR (default /var/tmp/nvmf-lab), SKIP_BUILD, LAB_MEM, LAB_CPUS and
# the other LAB_* of run-guest.
run_suite() {
    local name=$1 title=$2 script=$3 timeout=$4 root lab bin outlog rc
    shift 4
    root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
    lab=$root/integration/lab
    export NVMF_LAB_DIR=${NVMF_LAB_DIR:-/var/tmp/nvmf-lab}
    local opts=()
    while [ $# -gt 0 ]; do
        case $1 in
            --keep) opts+=(-k) ;;
            -e) opts+=(-e "$2"); shift ;;
            -h|--help) sed -n '2,/^set -e/p' "$0" | sed 's/^# \{0,1\}//;$d'; exit 0 ;;
            *) echo "run-$name-tests: unknown argument $1 (see --help)" >&2; exit 2 ;;
        esac
        shift
    done
    log() { printf '[run-%s-tests %(%T)T] %s\n' "$name" -1 "$*" >&2; }
    die() { log "ERROR: $*"; exit 1; }
    SECONDS=0
    if [ "$(id -u)" = 0 ]; then
        "$lab/build-image" || die "integration/lab/build-image failed"
    elif [ ! -e "$NVMF_LAB_DIR/rootfs.ext4" ]; then
        die "no lab image in $NVMF_LAB_DIR: run  sudo NVMF_LAB_DIR=$NVMF_LAB_DIR $lab/build-image"
    fi
    bin=$root/build/release/nvmf-target
    if command -v cargo >/dev/null && { [ -z "${SKIP_BUILD:-}" ] || [ ! -x "$bin" ]; }; then
        log "cargo build --release -p nvmf-target -p nvmf-initiator --bins --examples"
        (cd "$root" && env -u CARGO_TARGET_DIR cargo build --release -p nvmf-target \
            -p nvmf-initiator --bins --examples --target-dir "$root/build") \
            || die "cargo build --release failed"
    fi
    [ -x "$bin" ] || die "$bin missing"
    # What the caller builds from the build (e.g. the Debian package).
    if declare -F after_build >/dev/null; then
        after_build "$root" || die "preparing the suite (after_build) failed"
    fi
    mkdir -p "$root/integration/out"
    outlog=$root/integration/out/$name${LAB_SUITE:+-$LAB_SUITE}.log
    log "$title in the lab VM (output also in $outlog)"
    set +e
    "$lab/run-guest" -t "$timeout" -m "${LAB_MEM:-4096}" "${opts[@]}" \
        "$root" "$script" 2>&1 | tee "$outlog"
    rc=${PIPESTATUS[0]}
    set -e
    case $rc in
        0) log "PASS: $title (${SECONDS}s)" ;;
        124) log "FAIL: $title timed out" ;;
        125) log "FAIL: lab failure (the VM gave no result; try --keep and look at console.log)" ;;
        *) log "FAIL: $title (exit $rc): $(grep -m1 '^FAIL:' "$outlog" || echo 'see output above')" ;;
    esac
    exit "$rc"
}

# lab_packages ROOT: the Debian package of the release build (build/debian) and two newer
# versions of it, VERSION+lab1 and VERSION+lab2 (build/debian/upgrade, upgrade2), that
# upgrade tests install over it; their example configuration differs from the base's.
lab_packages() {
    local v
    v=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$1/Cargo.toml" | head -n 1)
    SKIP_BUILD=1 "$1/packaging/build-deb" >/dev/null || return 1
    SKIP_BUILD=1 DEB_VERSION="$v+lab1" DEB_OUT=build/debian/upgrade DEB_EXAMPLE_NOTE="example of $v+lab1" \
        "$1/packaging/build-deb" >/dev/null || return 1
    SKIP_BUILD=1 DEB_VERSION="$v+lab2" DEB_OUT=build/debian/upgrade2 DEB_EXAMPLE_NOTE="example of $v+lab2" \
        "$1/packaging/build-deb" >/dev/null
}
