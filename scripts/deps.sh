#!/usr/bin/env bash
# The dependency graphs between the files of src/ (and include/hcnn), and
# their loops: a file that depends, through others, on itself cannot be
# understood, tested or moved alone.
#   - the include graph: `#include "..."` between files of src/ and
#     include/hcnn (resolved as the compiler does: beside the including file,
#     then include/);
#   - the call graph between the built objects: A.o -> B.o when one of A's
#     undefined symbols is defined in B (nm; a library object as its libtool
#     object A.lo names it, in A's directory or its .libs/).  A reference to
#     a table's data counts like a call.
# Prints both graphs (the call graph's edges with the symbols that make
# them), then each loop (a strongly connected component of more than one
# file) with the edges inside it.  Exit status: 0 no loop, 1 a loop, 2 usage
# or nothing to read (no objects: build first).
#   scripts/deps.sh [BUILDDIR]      (default .; sources: $HCNN_SRCDIR, else
#                                    the directory above this script)
#   scripts/deps.sh --loops [BUILDDIR]   the loops only
set -u -o pipefail
LC_ALL=C
export LC_ALL

loops_only=0
if [ "${1:-}" = "--loops" ]; then
    loops_only=1
    shift
fi
case "${1:-}" in
-h | --help)
    sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'
    exit 0
    ;;
esac
builddir=${1:-.}
srcdir=${HCNN_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
if [ ! -d "$srcdir/src" ] || [ ! -d "$srcdir/include/hcnn" ]; then
    echo "deps.sh: no src/ and include/hcnn/ under $srcdir (set HCNN_SRCDIR)" >&2
    exit 2
fi
if ! command -v nm >/dev/null; then
    echo "deps.sh: nm not found (Debian package binutils)" >&2
    exit 2
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/hcnn-deps.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT

# Tarjan's strongly connected components over "FROM TO LABEL" lines (LABEL
# may be empty).  Prints the graph unless loops_only, then each component of
# more than one node: "loop N (K files): A B ...", its edges indented.
# Nodes and edges in sorted order, so the output is stable.
scc_awk='
function strongconnect(v,    i, w, m, size, members) {
    idx[v] = low[v] = counter++
    stack[++sp] = v
    onstack[v] = 1
    for (i = 1; i <= nout[v]; i++) {
        w = out[v, i]
        if (!(w in idx)) {
            strongconnect(w)
            if (low[w] < low[v]) low[v] = low[w]
        } else if (onstack[w] && idx[w] < low[v])
            low[v] = idx[w]
    }
    if (low[v] != idx[v]) return
    size = 0
    do {
        w = stack[sp--]
        onstack[w] = 0
        member[++size] = w
    } while (w != v)
    if (size < 2) return
    nloops++
    sortn(member, size)
    members = ""
    for (m = 1; m <= size; m++) {
        members = members " " member[m]
        loopof[member[m]] = nloops
    }
    loopline[nloops] = sprintf("loop %d (%d files):%s", nloops, size, members)
}
function sortn(a, n,    i, j, t) {
    for (i = 2; i <= n; i++)
        for (j = i; j > 1 && a[j - 1] > a[j]; j--) {
            t = a[j]; a[j] = a[j - 1]; a[j - 1] = t
        }
}
{
    from = $1; to = $2
    lab = $0
    sub(/^[^ ]+ [^ ]+ ?/, "", lab)
    if (!(from in seen)) { seen[from] = 1; node[++nnodes] = from }
    if (!(to in seen)) { seen[to] = 1; node[++nnodes] = to }
    if (!((from, to) in edge)) {
        edge[from, to] = 1
        out[from, ++nout[from]] = to
        efrom[++nedges] = from; eto[nedges] = to
    }
    if (lab != "") {
        prev = ((from, to) in label) ? label[from, to] ", " : ""
        label[from, to] = prev lab
    }
}
END {
    for (e = 1; e <= nedges; e++) {
        text[e] = efrom[e] " -> " eto[e] (((efrom[e], eto[e]) in label) ? " (" label[efrom[e], eto[e]] ")" : "")
        if (!loops_only) print "  " text[e]
    }
    for (i = 1; i <= nnodes; i++)
        if (!(node[i] in idx)) strongconnect(node[i])
    if (nloops == 0) { print "no loop"; exit 0 }
    for (l = 1; l <= nloops; l++) {
        print loopline[l]
        for (e = 1; e <= nedges; e++)
            if (loopof[efrom[e]] == l && loopof[eto[e]] == l) print "    " text[e]
    }
    exit 1
}'

# ---- the include graph ----------------------------------------------------------
(cd "$srcdir" && find src include/hcnn -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' \
    -o -name '*.cc' \) | sort) >"$tmp/files"
(cd "$srcdir" && xargs grep -H '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' <"$tmp/files") |
    awk -v files="$tmp/files" '
    function norm(p,    n, i, k, part, outp, r) {
        n = split(p, part, "/")
        k = 0
        for (i = 1; i <= n; i++) {
            if (part[i] == "." || part[i] == "") continue
            if (part[i] == ".." && k > 0 && outp[k] != "..") { k--; continue }
            outp[++k] = part[i]
        }
        r = ""
        for (i = 1; i <= k; i++) r = r (i > 1 ? "/" : "") outp[i]
        return r
    }
    BEGIN { while ((getline f <files) > 0) have[f] = 1 }
    {
        colon = index($0, ":")
        file = substr($0, 1, colon - 1)
        inc = substr($0, colon + 1)
        sub(/^[^"]*"/, "", inc)
        sub(/".*$/, "", inc)
        dir = file
        sub(/\/[^\/]*$/, "", dir)
        if ((c = norm(dir "/" inc)) in have) print file, c
        else if ((c = norm("include/" inc)) in have) print file, c
    }' | sort -u >"$tmp/includes"

# ---- the call graph -------------------------------------------------------------
# the objects of sources that exist (not one left behind by a moved file), each
# once, named DIR/NAME.o: a library source's libtool object DIR/NAME.lo names
# its object (DIR/NAME.o, or the PIC DIR/.libs/NAME.o: configure compiles it
# once, PIC); a program's source has a plain DIR/NAME.o.  Lines "NAME FILE".
(cd "$builddir" && find src \( -name '*.lo' -o -name '*.o' \) -not -path '*/.libs/*' 2>/dev/null |
    sort) | while read -r f; do
    base=${f%.*}
    case $f in
    *.lo)
        o=$(sed -n "s/^non_pic_object='\(.*\)'$/\1/p" "$builddir/$f")
        [ -n "$o" ] && [ "$o" != none ] || o=$(sed -n "s/^pic_object='\(.*\)'$/\1/p" "$builddir/$f")
        [ -n "$o" ] && [ "$o" != none ] || continue
        file=$(dirname "$f")/$o ;;
    *)
        [ ! -f "$builddir/$base.lo" ] || continue # its .lo names it
        file=$f ;;
    esac
    for ext in c cu cc; do
        if [ -f "$srcdir/$base.$ext" ]; then
            echo "$base.o $file"
            break
        fi
    done
done >"$tmp/objects"
if [ ! -s "$tmp/objects" ]; then
    echo "deps.sh: no objects under $builddir/src: build first (make), or name the build directory" >&2
    exit 2
fi
while read -r o file; do
    nm --defined-only -g "$builddir/$file" | awk -v o="$o" 'NF >= 2 { print "D", o, $NF }'
    nm -u "$builddir/$file" | awk -v o="$o" 'NF >= 1 { print "U", o, $NF }'
done <"$tmp/objects" >"$tmp/symbols"
# definitions first: A -> B for each symbol A needs and B (not A) defines
awk '$1 == "D" { defs[$3] = defs[$3] " " $2; next }
     $1 == "U" && ($3 in defs) {
         n = split(defs[$3], d, " ")
         for (i = 1; i <= n; i++) if (d[i] != $2) print $2, d[i], $3
     }' <(grep '^D' "$tmp/symbols") <(grep '^U' "$tmp/symbols") | sort -u >"$tmp/calls"

status=0
[ "$loops_only" = 1 ] || echo "# include graph (#include \"...\" between files of src/ and include/hcnn)"
awk -v loops_only="$loops_only" "$scc_awk" "$tmp/includes" | sed 's/^no loop$/include graph: no loop/; s/^loop /include loop /' || status=1
[ "$loops_only" = 1 ] || echo "# call graph between the objects of $builddir/src (A -> B (symbols of B that A uses))"
awk -v loops_only="$loops_only" "$scc_awk" "$tmp/calls" | sed 's/^no loop$/call graph: no loop/; s/^loop /call loop /' || status=1
exit $status
