#!/usr/bin/env bash
# The structure the code promises (include, call and symbol boundaries),
# checked on the built objects: a boundary a change crosses fails here.
# - winograd.o and winograd_plan.o (how a Winograd call is cut) use nothing
#   defined in conv_plan.o: the convolution plan
#   holds the whole Winograd choice and hands winograd.c its tile; the two
#   once called each other (the choice split between them, recomputed at 13
#   call sites).
# - no loop between the files of src/: neither in the include graph nor in
#   the call graph of the built objects (scripts/deps.sh prints both and
#   each loop with the symbols that close it).
. "${HCNN_SRCDIR:-.}/tests/lib.sh"

# defined SYMBOLS of OBJ; undefined ones of OBJ
defined() { nm --defined-only -g "$1" 2>/dev/null | awk '{print $3}' | sort -u; }
undefined() { nm -u "$1" 2>/dev/null | awk '{print $2}' | sort -u; }

case_begin winograd_uses_nothing_of_conv_plan
P="$HCNN_BUILDDIR/src/cpu/conv_plan.o"
objs=("$HCNN_BUILDDIR/src/cpu/winograd.o" "$HCNN_BUILDDIR/src/cpu/winograd_plan.o")
if ! command -v nm >/dev/null; then
    case_skip "nm not found (Debian package binutils)"
elif [ ! -f "${objs[0]}" ] || [ ! -f "${objs[1]}" ] || [ ! -f "$P" ]; then
    case_fail "objects not found: ${objs[*]} $P"
else
    used=""
    for W in "${objs[@]}"; do
        both=$(comm -12 <(undefined "$W") <(defined "$P") | tr '\n' ' ')
        [ -z "$both" ] || used="$used $(basename "$W") uses conv_plan.o's $both;"
    done
    if [ -z "$used" ]; then case_ok; else case_fail "$used"; fi
fi

case_begin no_loops_between_files
if ! command -v nm >/dev/null; then
    case_skip "nm not found (Debian package binutils)"
else
    HCNN_SRCDIR="$HCNN_SRCDIR" bash "$HCNN_SRCDIR/scripts/deps.sh" --loops "$HCNN_BUILDDIR" \
        >"$WORK/deps" 2>&1
    rc=$?
    if [ $rc -eq 0 ]; then
        case_ok
    else
        case_fail "scripts/deps.sh exit $rc:"
        sed 's/^/#   /' "$WORK/deps"
    fi
fi

finish
