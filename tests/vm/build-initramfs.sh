#!/usr/bin/env bash
# Builds the boot image of the VFIO VM test from the host's Debian packages:
# busybox-static, the kernel modules VFIO needs (with their dependency
# closure) from /lib/modules/<version>, the guest init and test script, and
# the guest test binary with whatever shared libraries it needs.
#
# Usage: build-initramfs.sh KERNEL_VERSION GUEST_BINARY OUTPUT_CPIO_GZ
# Needs: busybox-static, kmod (modprobe, depmod), cpio, gzip; xz or zstd
# when the modules are compressed (.ko.xz, .ko.zst: busybox's insmod cannot
# load those, so they are decompressed here).
set -euo pipefail
# depmod and modprobe live in /usr/sbin, which a non-root user's PATH on
# Debian lacks.
export PATH=$PATH:/usr/sbin:/sbin

kver=$1
guest_bin=$2
out=$3
here=$(cd "$(dirname "$0")" && pwd)

busybox=$(command -v busybox || true)
[ -n "$busybox" ] || busybox=/bin/busybox
if [ ! -x "$busybox" ] || ! "$busybox" --list >/dev/null 2>&1; then
    echo "build-initramfs: no busybox; install busybox-static (scripts/setup.sh does)" >&2
    exit 1
fi
if ldd "$busybox" 2>/dev/null | grep -q '=>'; then
    echo "build-initramfs: $busybox is dynamically linked; install busybox-static" >&2
    exit 1
fi
[ -d "/lib/modules/$kver" ] || { echo "build-initramfs: no /lib/modules/$kver" >&2; exit 1; }

root=$(mktemp -d "${TMPDIR:-/tmp}/rnic-vm-root.XXXXXX")
trap 'rm -rf "$root"' EXIT
mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,etc,proc,sys,dev,tmp,run,root}

# busybox and one symlink per applet (the init and test scripts are busybox sh)
cp "$busybox" "$root/bin/busybox"
for applet in $("$root/bin/busybox" --list); do
    [ -e "$root/bin/$applet" ] || ln -s busybox "$root/bin/$applet"
done

# Kernel modules: VFIO (busybox modprobe ignores softdeps, so list
# vfio_iommu_type1 explicitly) and virtio-pci for the "bound to another
# driver" check. modprobe --show-depends gives each module's closure.
mods="vfio vfio_iommu_type1 vfio_pci virtio_pci"
mkdir -p "$root/lib/modules/$kver"
for m in $mods; do
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
            command -v "$tool" >/dev/null 2>&1 || {
                echo "build-initramfs: $ko is compressed and there is no $tool; install $pkg (scripts/setup.sh does)" >&2
                exit 1
            }
            "$tool" -dc "$ko" > "$root${ko%.*}"
            ;;
        *) echo "build-initramfs: unexpected module file $ko" >&2; exit 1 ;;
    esac
done
for f in modules.order modules.builtin modules.builtin.modinfo; do
    [ -f "/lib/modules/$kver/$f" ] && cp "/lib/modules/$kver/$f" "$root/lib/modules/$kver/"
done
# modules.dep of the copied (now uncompressed) modules.
depmod -b "$root" "$kver"

# The guest test binary, plus its shared libraries (ldd closure) if it is
# not static.
cp "$guest_bin" "$root/usr/bin/$(basename "$guest_bin")"
libs=$(ldd "$guest_bin" 2>/dev/null | grep -oE '/[^ ]+' | sort -u || true)
for lib in $libs; do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
done

install -m 0755 "$here/init" "$root/init"
install -m 0755 "$here/guest.sh" "$root/guest.sh"
echo 'root:x:0:0:root:/root:/bin/sh' > "$root/etc/passwd"
echo 'root:x:0:' > "$root/etc/group"

(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) > "$out"
