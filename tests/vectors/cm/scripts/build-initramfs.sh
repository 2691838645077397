#!/bin/bash
# Build the guest initramfs for the RDMA-CM golden RoCEv2 capture (adapted from /work/shared/vectors/scripts).
# Needs: busybox-static linux-image-amd64 ibverbs-utils ibverbs-providers perftest rdma-core
#        iproute2 kmod cpio rdmacm-utils (librdmacm1)
# Output: CAPTURE_DIR/build/initramfs.cpio.gz   (staging in CAPTURE_DIR/build/rootfs)
set -euo pipefail
G=$(cd "$(dirname "$0")/.." && pwd)          # CAPTURE_DIR
KV=${KV:-$(ls /lib/modules | sort -V | tail -1)}
OUT=$G/build
R=$OUT/rootfs
rm -rf "$R"; mkdir -p "$R"/{bin,sbin,etc,proc,sys,dev,tmp,run,root,usr/bin,usr/sbin,var/run}

# 1. busybox (static) + applet symlinks
cp /bin/busybox "$R/bin/busybox"
for a in $("$R/bin/busybox" --list); do
  [ -e "$R/bin/$a" ] || ln -s busybox "$R/bin/$a"
done

# 2. kernel modules (with dependency closure), then depmod inside the tree
MODS="rdma_rxe ib_uverbs ib_core ib_cm iw_cm rdma_cm rdma_ucm configfs udp_tunnel ip6_udp_tunnel crc32_generic crc32_pclmul virtio_net virtio_pci"
mkdir -p "$R/lib/modules/$KV"
for m in $MODS; do
  modprobe -S "$KV" --show-depends "$m" | awk '$1=="insmod"{print $2}'
done | sort -u | while read -r f; do
  mkdir -p "$R$(dirname "$f")"; cp "$f" "$R$f"
done
cp /lib/modules/$KV/modules.{order,builtin,builtin.modinfo} "$R/lib/modules/$KV/"
depmod -b "$R" "$KV"

# 3. dynamically linked userland + their shared libraries (ldd closure)
BINS="/usr/bin/rdma /usr/sbin/ip /usr/bin/ibv_devinfo /usr/bin/ibv_devices
      /usr/bin/ibv_rc_pingpong
      /usr/bin/rping /usr/bin/ucmatose /usr/bin/udaddy /usr/bin/rdma_server /usr/bin/rdma_client"
# libgcc_s: glibc dlopen()s it for pthread_cancel/pthread_exit unwinding (rping's threads); ldd does not list it
LIBS="/usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so /usr/lib/x86_64-linux-gnu/librdmacm.so.1
      /lib/x86_64-linux-gnu/libgcc_s.so.1"
copy_with_libs() {
  local f=$1 dst=${2:-$1}
  mkdir -p "$R$(dirname "$dst")"; cp -L "$f" "$R$dst"
  ldd "$f" 2>/dev/null | grep -oE '/[^ ]+' | while read -r l; do
    mkdir -p "$R$(dirname "$l")"; cp -L "$l" "$R$l"
  done
}
for b in $BINS $LIBS; do copy_with_libs "$b"; done
mkdir -p "$R/etc/libibverbs.d"; cp /etc/libibverbs.d/rxe.driver "$R/etc/libibverbs.d/"
echo 'root:x:0:0:root:/root:/bin/sh' > "$R/etc/passwd"
echo 'root:x:0:' > "$R/etc/group"
printf '127.0.0.1 localhost\n::1 localhost\n' > "$R/etc/hosts"

# 4. /init = command agent on the serial console (driven by golden.py)
cp "$G/scripts/init" "$R/init"; chmod +x "$R/init"

(cd "$R" && find . | cpio -o -H newc --quiet | gzip -1) > "$OUT/initramfs.cpio.gz"
ls -la "$OUT/initramfs.cpio.gz"; du -sh "$R"
