#!/usr/bin/env bash
# One command from a fresh clone to a trained model, or to the test suite:
#
#   scripts/quickstart.sh         install what is missing, build, fetch MNIST,
#                                 train configs/mnist_lenet.yaml (1 epoch)
#   scripts/quickstart.sh check   the same set-up, then the whole test suite;
#                                 ends with "N passed, N failed"
#
# Environment: CONFIGURE_FLAGS (extra ./configure options, e.g. --enable-werror),
# JOBS (parallel make jobs for the build, default: number of cores).
set -euo pipefail

mode=${1:-train}
case "$mode" in
    train|check) ;;
    -h|--help) sed -n '2,11s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "quickstart: unknown mode '$mode' (train or check)" >&2; exit 2 ;;
esac

cd "$(dirname "${BASH_SOURCE[0]}")/.."
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}

bash scripts/install-deps.sh
# the Python package's tests run with the Python whose packages install-deps
# installed (Debian's), not a python3 earlier in PATH (pyenv) without them
if [ -z "${PYTHON:-}" ] && [ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
    export PYTHON=/usr/bin/python3
fi

if [ ! -x configure ] || [ configure.ac -nt configure ] || [ Makefile.am -nt configure ]; then
    echo "quickstart: autoreconf"
    autoreconf -fi >/dev/null
fi
if [ ! -f Makefile ] || [ configure -nt Makefile ] || [ -n "${CONFIGURE_FLAGS:-}" ]; then
    # shellcheck disable=SC2086
    ./configure ${CONFIGURE_FLAGS:-}
fi
make -j"$JOBS"

bash scripts/fetch-data.sh mnist

if [ "$mode" = train ]; then
    ./hcnn train --config configs/mnist_lenet.yaml
    exit 0
fi

# The tests run one after another (each uses the machine's cores); the
# summary counts every test case of every test program.
status=0
make -j"$JOBS" check TESTS= >/dev/null          # build the test programs in parallel
make check || status=$?
# a failing test's own log (its cases and their messages), so that a CI
# log says which case failed and why, not only which program
[ "$status" -eq 0 ] || [ ! -s test-suite.log ] || sed -n '/^FAIL: /,$p' test-suite.log | tail -n 200
make check-summary || status=1
exit $status
