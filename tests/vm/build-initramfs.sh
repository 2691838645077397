#!/usr/bin/env bash
# Builds the boot image of a VM test from the host's Debian packages:
# busybox-static with one link per applet, the kernel modules asked for
# (with their dependency closure) from /lib/modules/<version>, the guest
# init (tests/vm/init) and test script, and the programs and files asked
# for, each executable with the shared libraries ldd finds for it.
#
# Usage: build-initramfs.sh KERNEL_VERSION OUTPUT_CPIO_GZ GUEST_SCRIPT [ITEM...]
#   mod:NAME          the kernel module NAME and the modules it depends on
#   bin:PATH[=DEST]   an executable (at DEST, default its own path) and its
#                     shared libraries
#   file:PATH[=DEST]  a file as it is (at DEST, default its own path)
# The guest script becomes /guest.sh, which /init runs.
# Needs: busybox-static, kmod (modprobe, depmod), cpio, gzip; xz or zstd
# when the modules are compressed (.ko.xz, .ko.zst: busybox's insmod cannot
# load those, so they are decompressed here).
set -euo pipefail
# depmod and modprobe live in /usr/sbin, which a non-root user's PATH on
# Debian lacks.
export PATH=$PATH:/usr/sbin:/sbin

kver=$1
out=$2
guest_script=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
die() { echo "build-initramfs: $*" >&2; exit 1; }

busybox=$(command -v busybox || true)
[ -n "$busybox" ] || busybox=/bin/busybox
if [ ! -x "$busybox" ] || ! "$busybox" --list >/dev/null 2>&1; then
    die "no busybox; install busybox-static (scripts/setup.sh does)"
fi
if ldd "$busybox" 2>/dev/null | grep -q '=>'; then
    die "$busybox is dynamically linked; install busybox-static"
fi
[ -d "/lib/modules/$kver" ] || die "no /lib/modules/$kver"

root=$(mktemp -d "${TMPDIR:-/tmp}/rnic-vm-root.XXXXXX")
trap 'rm -rf "$root"' EXIT
mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,etc,proc,sys,dev,tmp,run,root}

# busybox and one symlink per applet (the init and test scripts are busybox sh)
cp "$busybox" "$root/bin/busybox"
for applet in $("$root/bin/busybox" --list); do
    [ -e "$root/bin/$applet" ] || ln -s busybox "$root/bin/$applet"
done

# Copies $1 to $2 inside the image, with the shared libraries it needs.
install_bin() {
    [ -r "$1" ] || die "no $1"
    mkdir -p "$root$(dirname "$2")"
    cp -L "$1" "$root$2"
    local lib
    for lib in $(ldd "$1" 2>/dev/null | grep -oE '/[^ ]+' | sort -u || true); do
        [ -e "$root$lib" ] && continue
        mkdir -p "$root$(dirname "$lib")"
        cp -L "$lib" "$root$lib"
    done
}

mods=()
for item in "$@"; do
    kind=${item%%:*}
    spec=${item#*:}
    src=${spec%%=*}
    dest=$src
    [ "$spec" = "$src" ] || dest=${spec#*=}
    case $kind in
        mod) mods+=("$src") ;;
        bin) install_bin "$src" "$dest" ;;
        file)
            [ -r "$src" ] || die "no $src"
            mkdir -p "$root$(dirname "$dest")"
            cp -L "$src" "$root$dest"
            ;;
        *) die "unknown item $item (mod:, bin: or file:)" ;;
    esac
done

# Kernel modules: modprobe --show-depends gives each module's closure
# (busybox modprobe ignores softdeps, so the caller lists those too).
mkdir -p "$root/lib/modules/$kver"
for m in "${mods[@]}"; do
    modprobe -S "$kver" --show-depends "$m" | awk '$1 == "insmod" { print $2 }'
done | sort -u | while read -r ko; do
    mkdir -p "$root$(dirname "$ko")"
    case $ko in
        *.ko) cp "$ko" "$root$ko" ;;
        *.ko.xz | *.ko.zst | *.ko.gz)
            case $ko in
                *.xz) tool=xz pkg=xz-utils ;;
                *.zst) tool=zstd pkg=zstd ;;
                *) tool=gzip pkg=gzip ;;
            esac
            command -v "$tool" >/dev/null 2>&1 ||
                die "$ko is compressed and there is no $tool; install $pkg (scripts/setup.sh does)"
            "$tool" -dc "$ko" > "$root${ko%.*}"
            ;;
        *) die "unexpected module file $ko" ;;
    esac
done
for f in modules.order modules.builtin modules.builtin.modinfo; do
    [ -f "/lib/modules/$kver/$f" ] && cp "/lib/modules/$kver/$f" "$root/lib/modules/$kver/"
done
# modules.dep of the copied (now uncompressed) modules.
depmod -b "$root" "$kver"

install -m 0755 "$here/init" "$root/init"
install -m 0755 "$guest_script" "$root/guest.sh"
echo 'root:x:0:0:root:/root:/bin/sh' > "$root/etc/passwd"
echo 'root:x:0:' > "$root/etc/group"
printf '127.0.0.1 localhost\n::1 localhost\n' > "$root/etc/hosts"

(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) > "$out"
