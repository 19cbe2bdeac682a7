#!/usr/bin/env bash
# The documentation's commands and links are real: for every fenced command
# block (```, ```sh, ```bash, ```console) of README.md and docs/*.md, each
# line (a leading "$ " prompt stripped, "\" continuations joined, split at
# ; && || |) that starts with hcnn, ./hcnn, make or a path of the tree
# (scripts/, bench/, slurm/, tests/, results/), also behind environment
# assignments and launchers (mpirun, srun, timeout, likwid-perfctr, ...):
# - hcnn: the sub-command is one `hcnn --help` lists, each --option is in
#   that sub-command's --help, each --set KEY a schema key (asked of hcnn
#   itself: `train --check --set KEY=0` says "unknown key" for any other;
#   dotted model.* keys are taken by their prefix, the model's blocks differ
#   from config to config);
# - a path: it exists in the source or the build tree (or is a program
#   Makefile.am builds), whatever it is (paths move: none is listed here);
# - make: each target is automake's or one Makefile.am defines.
# And every relative link [..](path#anchor) of those files names a file
# that exists and, for a .md file, a heading with that anchor (GitHub's);
# in a release tarball (no .git) a link to data the tarball leaves out
# (logs, results/) is only noted.  Lines of blocks marked ```text (output,
# diagrams) and of other languages are not commands.
# Failures name file:line and the token at fault.  No training: seconds.
. "${HCNN_SRCDIR:-.}/tests/lib.sh"

SRC=$HCNN_SRCDIR
CFG="$SRC/configs/synthetic_small.yaml"
# the command lines of FILE...: "file<TAB>line<TAB>token<US>token..." per
# simple command, quotes removed, comments dropped
commands_of() {
    LC_ALL=C awk -v US=$'\037' '
    function flush_cmd() {
        if (ntok > 0) {
            out = toks[1]
            for (k = 2; k <= ntok; k++) out = out US toks[k]
            printf "%s\t%d\t%s\n", FILENAME, start, out
        }
        ntok = 0
    }
    function end_tok() { if (intok) { toks[++ntok] = tok; tok = ""; intok = 0 } }
    function parse(s,    i, c, q) {
        sub(/^[ \t]+/, "", s)
        sub(/^\$ /, "", s)
        ntok = 0; tok = ""; intok = 0; q = ""
        for (i = 1; i <= length(s); i++) {
            c = substr(s, i, 1)
            if (q != "") {
                if (c == q) q = ""; else tok = tok c
                continue
            }
            if (c == "\047" || c == "\"") { q = c; intok = 1; continue }
            if (c == " " || c == "\t") { end_tok(); continue }
            if (c == "#" && !intok) break
            if (c == ";") { end_tok(); flush_cmd(); continue }
            if ((c == "&" || c == "|") && substr(s, i + 1, 1) == c) { end_tok(); flush_cmd(); i++; continue }
            if (c == "|" && !intok && (i == length(s) || substr(s, i + 1, 1) ~ /[ \t]/)) { flush_cmd(); continue }
            tok = tok c; intok = 1
        }
        end_tok(); flush_cmd()
    }
    FNR == 1 { inblk = 0; acc = "" }
    /^[ \t]*```+[^`]*$/ {
        if (!inblk) {
            lang = $0; sub(/^[ \t]*```[ \t]*/, "", lang); sub(/[ \t].*$/, "", lang)
            inblk = 1
            check = (lang == "" || lang == "sh" || lang == "bash" || lang == "shell" || lang == "console")
        } else inblk = 0
        acc = ""
        next
    }
    inblk && check {
        line = $0
        if (acc == "") start = FNR
        if (line ~ /\\$/) { sub(/\\$/, "", line); acc = acc line " "; next }
        parse(acc line); acc = ""
    }' "$@"
}

# the options (--name) a help text mentions
options_in() { grep -oE -- '--[a-zA-Z][a-zA-Z0-9-]*' | sort -u; }

"$HCNN" --help >"$WORK/help.top" 2>&1
SUBS=$(sed -n '/^commands:/,/^$/p' "$WORK/help.top" | awk 'NR > 1 && NF { print $1 }')
# help_has SUB OPT: OPT is in `hcnn SUB --help` (SUB "-": hcnn --help)
help_has() {
    local f="$WORK/help.$1"
    if [ ! -f "$f.opts" ]; then
        if [ "$1" = - ]; then cp "$WORK/help.top" "$f"; else "$HCNN" "$1" --help >"$f" 2>&1; fi
        options_in <"$f" >"$f.opts"
    fi
    [ "$2" = --help ] || grep -qxF -- "$2" "$f.opts"
}
# schema_key KEY: hcnn knows the configuration key KEY (cached per key)
schema_key() {
    case "$1" in model.*) return 0 ;; esac
    [[ "$1" =~ ^[a-z_][a-z0-9_]*$ ]] || return 1
    if [ ! -f "$WORK/key.$1" ]; then
        (cd "$WORK" && "$HCNN" train --config "$CFG" --check --set "$1=0" >/dev/null 2>"$WORK/key.$1.err")
        if grep -q "unknown key '$1'" "$WORK/key.$1.err"; then echo no; else echo yes; fi >"$WORK/key.$1"
    fi
    [ "$(cat "$WORK/key.$1")" = yes ]
}
AUTOMAKE_TARGETS=" all check install install-strip install-exec install-data installdirs uninstall
    clean distclean mostlyclean maintainer-clean dist dist-gzip dist-xz dist-bzip2 dist-zip distcheck
    distcleancheck installcheck check-TESTS recheck tags ctags TAGS info dvi pdf html ps "
AUTOMAKE_TARGETS=" $(echo $AUTOMAKE_TARGETS) "
# Makefile.am's rules, its .PHONY names and its programs, one a line
awk '{ while (/\\$/ && (getline more) > 0) { sub(/\\$/, ""); $0 = $0 " " more } }
     /^[A-Za-z0-9_.\/-]+:/ { t = $0; sub(/:.*/, "", t); print t }
     /^\.PHONY:/ || /_PROGRAMS *\+?=/ { sub(/^[^:=]*[:=] */, ""); n = split($0, w, /[ \t]+/); for (i = 1; i <= n; i++) print w[i] }' \
    "$SRC/Makefile.am" | sort -u >"$WORK/make.targets"
make_target() {
    [[ "$AUTOMAKE_TARGETS" == *" $1 "* ]] || grep -qxF -- "$1" "$WORK/make.targets"
}
tree_path() {
    local p=${1#./}
    [ -e "$SRC/$p" ] || [ -e "$HCNN_BUILDDIR/$p" ] || grep -qw -- "$p" "$SRC/Makefile.am"
}
is_tree_path() { [[ "$1" =~ ^(\./)?(scripts|bench|slurm|tests|results)/ ]]; }

BAD=()
bad() { BAD+=("$1:$2: '$3': $4"); }

# check_hcnn FILE LINE TOKENS...: an hcnn command line from its program name on
check_hcnn() {
    local f=$1 l=$2; shift 3
    local sub=- tok opt key
    CHECKED=$((CHECKED + 1))
    if [ $# -gt 0 ] && [[ "$1" != -* ]]; then
        sub=$1; shift
        if ! grep -qxF -- "$sub" <<<"$SUBS"; then bad "$f" "$l" "$sub" "not an hcnn command"; return; fi
    fi
    while [ $# -gt 0 ]; do
        tok=${1#[}; tok=${tok%%]*}; shift
        case "$tok" in
            [\<\>]*|[0-9]\>*|\&) return ;;      # a redirection: hcnn's arguments ended
        esac
        [[ "$tok" =~ ^--[a-zA-Z] ]] || continue
        opt=${tok%%=*}
        if ! help_has "$sub" "$opt"; then
            bad "$f" "$l" "$opt" "not in 'hcnn ${sub/#-/} --help'"; continue
        fi
        if [ "$opt" = --set ]; then
            if [ "$tok" != "$opt" ]; then key=${tok#--set=}; else key=${1#[}; shift; fi
            key=${key%%=*}
            [[ "$key" =~ ^[A-Z.]*$ ]] && continue         # a placeholder: KEY, ...
            schema_key "$key" || bad "$f" "$l" "$key" "not a configuration key (--set)"
        fi
    done
}

# check_line FILE LINE TOKENS...
LAUNCHERS=" mpirun mpiexec srun timeout likwid-perfctr valgrind env time nice "
check_line() {
    local f=$1 l=$2; shift 2
    local -a t=("$@")
    local i=0 j
    while [ $i -lt ${#t[@]} ] && [[ "${t[i]}" =~ ^[A-Za-z_][A-Za-z0-9_]*= ]]; do i=$((i + 1)); done
    [ $i -lt ${#t[@]} ] || return 0
    local first=${t[i]} look=0
    case "$first" in
        hcnn|./hcnn) check_hcnn "$f" "$l" "${t[@]:i}"; return ;;
        make)
            CHECKED=$((CHECKED + 1))
            for ((j = i + 1; j < ${#t[@]}; j++)); do
                case "${t[j]}" in -*|*=*|'') continue ;; [\<\>]*|[0-9]\>*) break ;; esac
                make_target "${t[j]}" || bad "$f" "$l" "${t[j]}" "not a make target (Makefile.am or automake's)"
            done
            return ;;
        bash|sh|sbatch)
            for ((j = i + 1; j < ${#t[@]}; j++)); do
                [[ "${t[j]}" == -* ]] && continue
                if is_tree_path "${t[j]}" && ! tree_path "${t[j]}"; then
                    bad "$f" "$l" "${t[j]}" "no such file in the tree"
                fi
                break
            done
            look=1 ;;
        *)
            if is_tree_path "$first"; then
                CHECKED=$((CHECKED + 1))
                tree_path "$first" || { bad "$f" "$l" "$first" "no such file in the tree"; return; }
                case "$first" in */hcnn-mpirun|*/sanitizers/run.sh) look=1 ;; esac
            elif [[ "$LAUNCHERS" == *" $first "* ]]; then
                look=1
            fi ;;
    esac
    [ $look -eq 1 ] || return 0
    for ((j = i + 1; j < ${#t[@]}; j++)); do
        case "${t[j]}" in
            hcnn|./hcnn) check_hcnn "$f" "$l" "${t[@]:j}"; return ;;
        esac
    done
}

# check_files FILE...: BAD gets every fault of their command blocks
check_files() {
    local f l cmd
    local -a toks
    BAD=()
    while IFS=$'\t' read -r f l cmd; do
        IFS=$'\037' read -r -a toks <<<"$cmd"
        check_line "${f#"$SRC"/}" "$l" "${toks[@]}"
    done < <(commands_of "$@")
}

# GitHub's anchors of FILE's headings (outside code blocks), one a line
anchors_of() {
    LC_ALL=C awk '
    /^[ \t]*```+[^`]*$/ { inblk = !inblk; next }
    !inblk && /^#+ / {
        h = $0; sub(/^#+ +/, "", h); sub(/ +#*$/, "", h); h = tolower(h)
        gsub(/[^a-z0-9 _-]/, "", h); gsub(/ /, "-", h)
        if (h in seen) { n = seen[h]; seen[h] = n + 1; h = h "-" n } else seen[h] = 1
        print h
    }' "$1"
}

# check_links FILE: BAD gets every relative link of FILE that leads nowhere
check_links() {
    local f=$1 rel=${1#"$SRC"/} dir l link path anchor target
    dir=$(dirname "$f")
    while IFS=$'\t' read -r l link; do
        path=${link%%#*}; anchor=
        [[ "$link" == *#* ]] && anchor=${link#*#}
        if [ -n "$path" ]; then target="$dir/$path"; else target=$f; fi
        if [ ! -e "$target" ]; then
            # a release tarball carries the documentation, not every log a page links to
            if [ -e "$SRC/.git" ] || [[ "$path" == *.md ]]; then
                bad "$rel" "$l" "$link" "no such file"
            else
                echo "# $rel:$l: $link: not in this tarball (a source checkout has it)"
            fi
            continue
        fi
        if [ -n "$anchor" ] && [[ "$target" == *.md ]] && ! anchors_of "$target" | grep -qxF -- "$anchor"; then
            bad "$rel" "$l" "$link" "no heading with this anchor in $path"
        fi
    done < <(LC_ALL=C awk '
        /^[ \t]*```+[^`]*$/ { inblk = !inblk; next }
        !inblk {
            s = $0
            while (match(s, /\]\([^)]+\)/)) {
                t = substr(s, RSTART + 2, RLENGTH - 3); s = substr(s, RSTART + RLENGTH)
                sub(/[ \t].*$/, "", t)
                if (t !~ /^[a-z]+:/) printf "%d\t%s\n", FNR, t
            }
        }' "$f")
}

CHECKED=0
report() {
    [ "$CHECKED" -eq 0 ] || echo "# $CHECKED command lines checked"
    CHECKED=0
    if [ ${#BAD[@]} -eq 0 ]; then case_ok; return; fi
    printf '# %s\n' "${BAD[@]}"
    case_fail "${#BAD[@]} fault(s), listed above"
}

# The checker itself finds a wrong command, option, key, script and target
# (a test that cannot fail checks nothing).
case_begin checker_finds_faults
cat >"$WORK/bad.md" <<'EOF'
```sh
$ ./hcnn trian --config x.yaml
OMP_NUM_THREADS=2 mpirun -np 2 ./hcnn train --config x.yaml --confg y --set lrr=0.1 --set lr=0.1
scripts/no-such-script.sh --help
make check && make no-such-target
./hcnn plan --config x.yaml --nodes 1,2 \
    --set model.blocks.0.out=8 --network ib-hdr    # a continuation, a comment --bogus
```
[a link](nowhere.md) and [an anchor](bad.md#no-such-heading)
```python
hcnn trian   # not a command block
```
EOF
check_files "$WORK/bad.md"
check_links "$WORK/bad.md"
want=("bad.md:2: 'trian'" "bad.md:3: '--confg'" "bad.md:3: 'lrr'" "bad.md:4: 'scripts/no-such-script.sh'"
      "bad.md:5: 'no-such-target'" "bad.md:9: 'nowhere.md'" "bad.md:9: 'bad.md#no-such-heading'")
missing=""
for w in "${want[@]}"; do
    printf '%s\n' "${BAD[@]}" | grep -qF -- "$w" ||
        missing="$missing [$w]"
done
if [ -z "$missing" ] && [ ${#BAD[@]} -eq ${#want[@]} ]; then
    case_ok
else
    printf '# %s\n' "${BAD[@]}"
    case_fail "expected exactly ${#want[@]} faults; missing:${missing:- none}"
fi

DOCS=("$SRC/README.md" "$SRC"/docs/*.md)
CHECKED=0
for f in "${DOCS[@]}"; do
    case_begin "commands_${f#"$SRC"/}"
    check_files "$f"
    report
done
case_begin links
BAD=() CHECKED=0
for f in "${DOCS[@]}"; do check_links "$f"; done
report

finish
