#!/usr/bin/env bash
# The Python package (python/hcnn, docs/python.md): the pytest cases of
# tests/python, each one test case here ("[       OK ] file::case" or
# "[  FAILED  ] ..."; a pytest skip is a skipped case), run with
# PYTHONPATH=$HCNN_BUILDDIR/python (the package make wrote there, its
# _libpath.py naming the built library) and the interpreter $PYTHON
# (configure's PYTHON; default python3).  Without NumPy or pytest the test
# is skipped (exit 77) saying so, or fails when HCNN_REQUIRE_PYTHON=1 (CI).
# A sanitizer build: Python is not built with AddressSanitizer, so its
# runtime is preloaded (LD_PRELOAD, leak detection off: the interpreter's
# own allocations at exit are not hcnn's); hcnn and mpirun run without it.
. "${HCNN_SRCDIR:-.}/tests/lib.sh"
export HCNN_SRCDIR HCNN_BUILDDIR HCNN
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
PY=${PYTHON:-python3}

# not runnable here: skipped with the reason, or failed under HCNN_REQUIRE_PYTHON=1
unavailable() {
    case_begin python_package
    if [ "${HCNN_REQUIRE_PYTHON:-0}" = 1 ]; then case_fail "$1 (HCNN_REQUIRE_PYTHON=1)"
    else case_skip "$1"; fi
    finish
}
[ "$PY" != ":" ] || unavailable "configure found no Python 3.9 or newer (PYTHON=:; configure PYTHON=...)"
command -v "$PY" >/dev/null 2>&1 || unavailable "no Python interpreter '$PY' (configure PYTHON=...)"
if ! why=$("$PY" -c 'import numpy, pytest' 2>&1); then
    unavailable "$PY lacks NumPy or pytest ($(tail -n 1 <<<"$why"); Debian: python3-numpy python3-pytest, PYTHON=/usr/bin/python3)"
fi

PKG=$HCNN_BUILDDIR/python
LIB=${HCNN_LIBRARY:-}
if [ -z "$LIB" ]; then
    if [ ! -f "$PKG/hcnn/_libpath.py" ]; then
        case_begin python_package_built
        case_fail "no $PKG/hcnn/_libpath.py: make writes it (Makefile.am)"
        finish
    fi
    LIB=$(sed -n "s/^LIBRARY = '\(.*\)'\$/\1/p" "$PKG/hcnn/_libpath.py")
fi
[ -f "$LIB" ] || unavailable "no shared library at $LIB (a build without shared libraries: configure --disable-shared?)"

preload=""
if ldd "$LIB" 2>/dev/null | grep -q 'libasan'; then
    preload=$(${CC:-gcc} -print-file-name=libasan.so 2>/dev/null)
    case "$preload" in
        /*) ;;
        *) unavailable "a sanitizer build, and '${CC:-gcc} -print-file-name=libasan.so' names no runtime to preload into Python" ;;
    esac
    export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
    export HCNN_TEST_PRELOAD=$preload
fi

export PYTHONPATH="$PKG${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONDONTWRITEBYTECODE=1 # nothing written into the trees (make distcheck's is read-only)
echo "# $PY ($("$PY" -c 'import sys; print(sys.version.split()[0])')), library $LIB${preload:+, LD_PRELOAD=$preload}"
(
    cd "$WORK" || exit 1
    [ -z "$preload" ] || export LD_PRELOAD=$preload
    exec timeout -k 10 600 "$PY" -m pytest -p no:cacheprovider -q -rfEs --durations=5 \
        --junitxml="$WORK/junit.xml" -o junit_family=xunit1 "$HCNN_SRCDIR/tests/python"
) >"$WORK/pytest.out" 2>&1
rc=$?
sed 's/^/# /' "$WORK/pytest.out" | tail -n 400

if [ ! -s "$WORK/junit.xml" ]; then
    case_begin pytest
    case_fail "pytest ended with status $rc and no report (a crash or the 600 s timeout)"
    finish
fi
# one line per case: STATUS<TAB>NAME<TAB>why
while IFS=$'\t' read -r status name why; do
    case_begin "$name"
    case "$status" in
        ok) case_ok ;;
        skip) case_skip "$why" ;;
        *) case_fail "$why" ;;
    esac
done < <("$PY" - "$WORK/junit.xml" <<'PYEOF'
import sys
import xml.etree.ElementTree as ET

for tc in ET.parse(sys.argv[1]).getroot().iter("testcase"):
    name = "%s::%s" % (tc.get("classname", "").split(".")[-1], tc.get("name"))
    name = "".join(c if c.isprintable() and not c.isspace() else "_" for c in name)
    status, why = "ok", ""
    for child in tc:
        if child.tag in ("failure", "error"):
            status, why = "fail", child.get("message") or child.tag
            break
        if child.tag == "skipped":
            status, why = "skip", child.get("message") or "skipped"
    why = " ".join(why.split())[:300]
    print("%s\t%s\t%s" % (status, name, why))
PYEOF
)
if [ $rc -ne 0 ] && [ "$T_FAILED" -eq 0 ]; then
    case_begin pytest
    case_fail "pytest ended with status $rc although no case failed"
fi
finish
