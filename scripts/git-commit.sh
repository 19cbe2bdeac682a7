#!/bin/sh
# Writes OUT (a C header) defining HCNN_GIT_COMMIT, the commit of the sources
# in SRCDIR as make runs (not as configure ran: a commit after ./configure is
# seen by the next make), with "-dirty" when tracked files have uncommitted
# changes.  Without git (a release tarball) the commit recorded by
# `make dist` in SRCDIR/.git-commit, else "unknown".  OUT is rewritten only
# when the value changes, so that an unchanged tree recompiles nothing.
#   scripts/git-commit.sh SRCDIR OUT
set -u
srcdir=$1 out=$2
commit=""
if command -v git >/dev/null 2>&1 && git -C "$srcdir" rev-parse --git-dir >/dev/null 2>&1; then
    commit=$(git -C "$srcdir" rev-parse --short=12 HEAD 2>/dev/null)
    if [ -n "$commit" ]; then
        git -C "$srcdir" update-index -q --refresh >/dev/null 2>&1
        git -C "$srcdir" diff-index --quiet HEAD -- 2>/dev/null || commit="$commit-dirty"
    fi
fi
if [ -z "$commit" ] && [ -s "$srcdir/.git-commit" ]; then
    commit=$(head -n 1 "$srcdir/.git-commit")
fi
[ -n "$commit" ] || commit=unknown
line="#define HCNN_GIT_COMMIT \"$commit\""
if [ -f "$out" ] && [ "$(cat "$out")" = "$line" ]; then exit 0; fi
echo "$line" >"$out.tmp" && mv -f "$out.tmp" "$out"
