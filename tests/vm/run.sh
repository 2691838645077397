#!/usr/bin/env bash
# The VFIO VM test: proves rnic-vfio against a real Linux kernel's VFIO and
# IOMMU. Builds the guest test program (vfio/examples/edu_check.rs,
# statically linked), packs it with busybox and the host's Debian kernel
# modules into an initramfs, and boots the host's Debian kernel under QEMU
# (TCG) on a q35 machine with an emulated Intel IOMMU and QEMU's `edu` PCI
# devices. The guest binds the devices to vfio-pci and runs the checks
# (tests/vm/guest.sh); this script passes when the guest prints
# "RNIC-VM-RESULT: PASS" and fails on anything else or on timeout.
#
# Usage: tests/vm/run.sh
# Environment:
#   RNIC_VM_TIMEOUT  seconds before the VM is killed (default 180)
#   RNIC_VM_KERNEL   kernel version to boot (default: the newest in /boot
#                    that has the vfio-pci module in /lib/modules)
#   RNIC_VM_KERNEL_IMAGE  its image (default /boot/vmlinuz-$RNIC_VM_KERNEL)
#   RNIC_VM_WORK     work directory (default target/vm)
# The guest also lists and opens an edu bound to vfio-pci through rnic's
# drop-in libibverbs (ibverbs/), with rdma-core's ibv_devices and
# ibv_devinfo.
# Needs: qemu-system-x86, linux-image-amd64, busybox-static, cpio, kmod,
# ibverbs-utils, and
# xz-utils or zstd if the kernel's modules are compressed (scripts/setup.sh
# installs them) and a Rust toolchain.
set -euo pipefail
# depmod and modprobe live in /usr/sbin, which a non-root user's PATH on
# Debian lacks.
export PATH=$PATH:/usr/sbin:/sbin

repo=$(cd "$(dirname "$0")/../.." && pwd)
here=$repo/tests/vm
work=${RNIC_VM_WORK:-$repo/target/vm}
timeout_s=${RNIC_VM_TIMEOUT:-180}
mkdir -p "$work"
t_start=$(date +%s.%N)
elapsed() { awk -v a="$t_start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
die() { echo "vm-test: $*" >&2; echo "vm-test: FAIL"; exit 1; }

for tool in qemu-system-x86_64 cpio depmod modprobe gzip; do
    command -v "$tool" >/dev/null 2>&1 ||
        die "$tool not found; run scripts/setup.sh (it installs qemu-system-x86, busybox-static, cpio, kmod, linux-image-amd64)"
done

# The kernel: the newest /boot/vmlinuz-* whose modules include vfio-pci.
. "$here/kernel.sh"
kver=$(vm_kernel vfio-pci)
[ -n "$kver" ] && [ -d "/lib/modules/$kver" ] ||
    die "no kernel in /boot with VFIO modules in /lib/modules; install linux-image-amd64 (scripts/setup.sh)"
kimage=${RNIC_VM_KERNEL_IMAGE:-/boot/vmlinuz-$kver}
[ -r "$kimage" ] ||
    die "$kimage is not readable by $(id -un) (Ubuntu installs kernel images mode 0600; Debian 0644): run as root, or copy it somewhere readable and point RNIC_VM_KERNEL_IMAGE at it"
echo "vm-test: kernel $kver"

# 1. The guest program, static so the initramfs needs no libraries. Its
# own target directory and an explicit --target keep these RUSTFLAGS away
# from the workspace's normal build cache.
echo "vm-test: building edu_check (static, release)"
guest_target=$work/cargo
(cd "$repo" && CARGO_TARGET_DIR=$guest_target RUSTFLAGS="-C target-feature=+crt-static" \
    cargo build --quiet --release --target x86_64-unknown-linux-gnu \
    -p rnic-vfio --example edu_check)
guest_bin=$guest_target/x86_64-unknown-linux-gnu/release/examples/edu_check
[ -x "$guest_bin" ] || die "no $guest_bin after the build"

# The drop-in libibverbs and rdma-core's utilities, to list and open a
# device bound to vfio-pci through it.
echo "vm-test: building the drop-in libibverbs (release)"
ibverbs_lib=$(cd "$repo" && bash ibverbs/build.sh --release)

# 2. The boot image.
initrd=$work/initramfs.cpio.gz
# busybox modprobe ignores softdeps: vfio_iommu_type1 is listed by hand;
# virtio-pci is for the "bound to another driver" check.
bash "$here/build-initramfs.sh" "$kver" "$initrd" "$here/guest.sh" \
    mod:vfio mod:vfio_iommu_type1 mod:vfio_pci mod:virtio_pci \
    "bin:$guest_bin=/usr/bin/edu_check" \
    "bin:$ibverbs_lib=/usr/lib/rnic/libibverbs.so.1" bin:/usr/bin/ibv_devices bin:/usr/bin/ibv_devinfo
echo "vm-test: initramfs $(du -h "$initrd" | cut -f1) ($(elapsed) s so far)"

# 3. Boot. qboot is the fastest firmware; SeaBIOS (QEMU's default) works too.
# The serial console carries only the guest's own output: loglevel=1 keeps
# kernel messages off it (the guest reads them with dmesg), QEMU's stderr
# (it reports the IOMMU faults the test provokes) goes to its own file, and
# shpc=off keeps the SHPC hotplug driver quiet about the pci-bridge.
bios=()
[ -r /usr/share/qemu/qboot.rom ] && bios=(-bios /usr/share/qemu/qboot.rom)
log=$work/serial.log
qemu_err=$work/qemu.stderr
echo "vm-test: booting (TCG, timeout ${timeout_s} s); serial log in $log, QEMU's stderr in $qemu_err"
t_boot=$(date +%s.%N)
set +e
timeout -k 5 "$timeout_s" qemu-system-x86_64 \
    -machine q35,kernel-irqchip=split -accel tcg -cpu max -smp 1 -m 1024 \
    "${bios[@]}" -nographic -nodefaults -no-reboot -serial stdio \
    -kernel "$kimage" -initrd "$initrd" \
    -append "console=ttyS0 panic=-1 loglevel=1 intel_iommu=on hugepages=16" \
    -device intel-iommu,intremap=on \
    -device edu,addr=01.0 \
    -device pcie-root-port,id=rp1,chassis=1,addr=02.0 \
    -device edu,bus=rp1 \
    -device virtio-rng-pci,addr=03.0 \
    -device pci-bridge,id=br1,chassis_nr=2,addr=04.0,shpc=off \
    -device edu,bus=br1,addr=01.0 \
    -device virtio-rng-pci,bus=br1,addr=02.0 \
    </dev/null 2>"$qemu_err" | tr -d '\r' | tee "$log"
rc=${PIPESTATUS[0]}
set -e
vm_s=$(awk -v a="$t_boot" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')

passed=$(grep -c '^ok ' "$log" || true)
failed=$(grep -c '^FAIL ' "$log" || true)
echo
echo "vm-test: VM ran ${vm_s} s (whole test $(elapsed) s); guest checks: $passed ok, $failed failed"
if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    die "timed out after ${timeout_s} s"
fi
if grep -q '^FAIL ' "$log"; then
    grep '^FAIL \|FAILED' "$log" >&2 || true
fi
if grep -qx 'RNIC-VM-RESULT: PASS' "$log" && [ "$failed" = 0 ] && [ "$passed" -gt 0 ]; then
    echo "vm-test: PASS"
    exit 0
fi
[ "$rc" = 0 ] || echo "vm-test: qemu exited with status $rc" >&2
if [ -s "$qemu_err" ]; then
    echo "vm-test: QEMU's stderr ($qemu_err) ends with:" >&2
    tail -5 "$qemu_err" >&2
fi
die "the guest did not report RNIC-VM-RESULT: PASS (see $log)"
