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
# - every external symbol libhcnn.a defines begins with hcnn_ (a library's
#   names stay in its own namespace: a program or a Python module linking
#   it meets no unprefixed name of ours), but for the CUDA API that the
#   emulation stands in for and the C++ the compiler emits on its own.
# - libhcnn.so exports hcnn_ names only (libtool's -export-symbols-regex).
. "${HCNN_SRCDIR:-.}/tests/lib.sh"

# defined SYMBOLS of OBJ; undefined ones of OBJ
defined() { nm --defined-only -g "$1" 2>/dev/null | awk '{print $3}' | sort -u; }
undefined() { nm -u "$1" 2>/dev/null | awk '{print $2}' | sort -u; }
# the object of libtool object DIR/NAME.lo (its non-PIC object, else its PIC
# one: configure compiles the library once, PIC, into DIR/.libs/NAME.o)
object_of() {
    local lo=$1 o
    o=$(sed -n "s/^non_pic_object='\(.*\)'$/\1/p" "$lo" 2>/dev/null)
    [ -n "$o" ] || o=$(sed -n "s/^pic_object='\(.*\)'$/\1/p" "$lo" 2>/dev/null)
    [ -n "$o" ] && echo "$(dirname "$lo")/$o" || echo "${lo%.lo}.o"
}

case_begin winograd_uses_nothing_of_conv_plan
P=$(object_of "$HCNN_BUILDDIR/src/cpu/conv_plan.lo")
objs=("$(object_of "$HCNN_BUILDDIR/src/cpu/winograd.lo")" "$(object_of "$HCNN_BUILDDIR/src/cpu/winograd_plan.lo")")
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

# SCOPE: the outermost scope of the C++ mangled name $1 (_Z...): "std" for
# the standard library's, else the first identifier (the namespace, class or
# function), "?" when not understood.  _ZN8hcnn_emu5drainE...: hcnn_emu;
# _Z10add_kernelPKf...: add_kernel; _ZTVSt23_Sp_counted...: std.
cxx_scope() {
    local s=${1#_Z}
    while :; do
        case $s in
            T[ISVT]*|GV*|GR*) s=${s:2} ;; # typeinfo, its name, vtable, VTT; guard, temporary
            [ZNLrVK]*) s=${s:1} ;;        # local entity, nested name, internal, cv-qualifiers
            *) break ;;
        esac
    done
    case $s in
        S[tabiosd]*) SCOPE=std ;; # std:: and its abbreviations (Sa: std::allocator, ...)
        [0-9]*)
            local len=${s%%[!0-9]*}
            SCOPE=${s:${#len}:$len}
            ;;
        *) SCOPE="?" ;;
    esac
}

# What may be defined without hcnn_:
# - the CUDA runtime and cuBLAS API that the emulation (configure
#   --enable-cuda-emulation) defines: C names cuda*, cublas*, __cuda*, and
#   CUDA's C++ names dim3 (its inline constructor), __syncthreads and
#   __float2bfloat16;
# - C++ vague linkage of the standard library: weak (W, V) or unique (u)
#   definitions in std:: or __gnu_cxx:: (template instances, typeinfo and
#   vtables that every C++ object using them emits and the linker merges),
#   and the C++ runtime's DW.ref.__gxx_personality_v0.
# - AddressSanitizer's ODR indicators (__odr_asan.NAME, configure
#   --enable-sanitizers), one for each external global: judged by NAME.
# - NVTX3's header-only implementation (configure --with-nvtx; src/core/trace.h):
#   the weak (W, V) link-once definitions nvtx*_v3 and
#   InitializeInjectionNvtx2_fnptr that every object including it emits and
#   the linker merges (hidden or left out of libhcnn.so's exports, below).
# Our own C++ counts by its outermost scope: hcnn_emu::drain (namespace
# hcnn_emu) and hcnn_cuda_add(...) pass; a kernel add_kernel(...) does not
# (the kernels are static: each is launched from its own file).
case_begin archive_symbols_prefixed
A="$HCNN_BUILDDIR/.libs/libhcnn.a"
if ! command -v nm >/dev/null; then
    case_skip "nm not found (Debian package binutils)"
elif [ ! -f "$A" ]; then
    case_fail "archive not found: $A"
else
    bad=() n=0
    while read -r type name; do
        n=$((n + 1))
        # --enable-sanitizers: AddressSanitizer's ODR indicator of each
        # external global (__odr_asan.NAME) is judged by the global's name
        name=${name#__odr_asan.}
        case $name in
            hcnn_* | cuda* | cublas* | __cuda* | DW.ref.__gxx_personality_v0) continue ;;
            nvtx*_v3 | InitializeInjectionNvtx2_fnptr) [[ $type == [WV] ]] && continue ;;
            _Z*)
                cxx_scope "$name"
                case $SCOPE in
                    hcnn_* | dim3 | __syncthreads | __float2bfloat16) continue ;;
                    std | __gnu_cxx) [[ $type == [WVu] ]] && continue ;;
                esac
                ;;
        esac
        bad+=("$name")
    done < <(nm -g --defined-only "$A" 2>/dev/null | awk 'NF == 3 {print $2, $3}' | sort -u -k2)
    if [ "$n" -eq 0 ]; then
        case_fail "nm lists no defined external symbol in $A"
    elif [ ${#bad[@]} -eq 0 ]; then
        case_ok
    else
        for b in "${bad[@]:0:30}"; do
            echo "#   $b$([[ $b == _Z* ]] && command -v c++filt >/dev/null && echo " ($(c++filt "$b"))")"
        done
        case_fail "${#bad[@]} of the $n external symbols of libhcnn.a do not begin with hcnn_" \
            "($([ ${#bad[@]} -gt 30 ] && echo "the first 30 " )above): name them hcnn_..., or make them static"
    fi
fi

# The shared library's dynamic symbols: hcnn_ names only, without the
# exceptions above (the emulation's CUDA API and the C++ runtime's names stay
# inside it).  libhcnn.la's dlname names it; empty: configure --disable-shared.
case_begin shared_library_exports
L="$HCNN_BUILDDIR/libhcnn.la"
dl=$(sed -n "s/^dlname='\(.*\)'$/\1/p" "$L" 2>/dev/null)
if ! command -v nm >/dev/null; then
    case_skip "nm not found (Debian package binutils)"
elif [ ! -f "$L" ]; then
    case_fail "libtool library not found: $L"
elif [ -z "$dl" ]; then
    case_skip "no shared library in this build (configure --disable-shared)"
elif [ ! -f "$HCNN_BUILDDIR/.libs/$dl" ]; then
    case_fail "shared library not found: $HCNN_BUILDDIR/.libs/$dl"
else
    mapfile -t exported < <(nm -D --defined-only "$HCNN_BUILDDIR/.libs/$dl" | awk 'NF == 3 {print $3}' | sort -u)
    bad=()
    for name in "${exported[@]}"; do
        case $name in hcnn_*) ;; *) bad+=("$name") ;; esac
    done
    if [ ${#exported[@]} -eq 0 ]; then
        case_fail "nm -D lists no defined symbol in $dl"
    elif [ ${#bad[@]} -eq 0 ]; then
        echo "# $dl exports ${#exported[@]} symbols, all hcnn_*"
        case_ok
    else
        for b in "${bad[@]:0:30}"; do echo "#   $b"; done
        case_fail "${#bad[@]} of the ${#exported[@]} symbols $dl exports do not begin with hcnn_" \
            "($([ ${#bad[@]} -gt 30 ] && echo "the first 30 " )above): Makefile.am's -export-symbols-regex"
    fi
fi

# NVTX ranges off at no cost: in a build without them (configure
# --without-nvtx, or no nvtx3/nvToolsExt.h found; hcnn --version says "NVTX:
# none") src/core/trace.h's calls compile to nothing, so neither the library
# nor the program holds any NVTX symbol, defined or called.  With them, the
# program holds NVTX3's range functions (the check that it is the build
# --version says).
case_begin nvtx_only_where_built
A="$HCNN_BUILDDIR/.libs/libhcnn.a"
nvtx_line=$("$HCNN" --version 2>/dev/null | grep '^NVTX:')
if ! command -v nm >/dev/null; then
    case_skip "nm not found (Debian package binutils)"
elif [ ! -f "$A" ] || [ -z "$nvtx_line" ]; then
    case_fail "archive $A or hcnn --version's NVTX line missing ('$nvtx_line')"
else
    n_lib=$(nm "$A" 2>/dev/null | grep -ci nvtx)
    n_prog=$(nm "$HCNN" 2>/dev/null | grep -ci nvtx)
    case $nvtx_line in
    "NVTX: none"*)
        if [ "$n_lib" -eq 0 ] && [ "$n_prog" -eq 0 ]; then case_ok
        else
            nm "$A" 2>/dev/null | grep -i nvtx | sort -u | head -n 10 | sed 's/^/#   /'
            case_fail "$nvtx_line, yet $n_lib NVTX symbols in libhcnn.a and $n_prog in hcnn (above)"
        fi ;;
    *)
        if [ "$n_prog" -gt 0 ]; then case_ok
        else case_fail "$nvtx_line, yet hcnn holds no NVTX symbol"; fi ;;
    esac
fi

finish
