#!/bin/sh
# The VFIO VM test, guest side (busybox sh, run by /init).
#
# QEMU gives the guest (see run.sh):
#   00:02.0 pcie-root-port, with an edu behind it: the main device (it can be
#           reset: the kernel resets its secondary bus);
#   00:01.0 edu on the root bus: no reset method;
#   00:03.0 virtio-rng-pci: bound to virtio-pci, then to vfio-pci for MSI-X;
#   00:04.0 pci-bridge with an edu and a virtio-rng-pci behind it: one IOMMU
#           group, not viable while the virtio device keeps its driver.
# Prints "RNIC-VM-RESULT: PASS" at the end when every step passed.

fail=0
say() { echo "rnic-vm: $*"; }
step() {
    name=$1; shift
    say "== $name: $*"
    if "$@"; then say "== $name: passed"; else say "== $name: FAILED"; fail=1; fi
}

say "kernel $(uname -r), $(grep -c ^processor /proc/cpuinfo) CPU(s)"
for m in vfio_iommu_type1 vfio_pci virtio_pci; do
    # busybox modprobe ignores softdeps: vfio_iommu_type1 is loaded by hand
    modprobe "$m" || { say "modprobe $m failed"; fail=1; }
done
if [ -z "$(ls /sys/kernel/iommu_groups 2>/dev/null)" ]; then
    say "no IOMMU groups: intel-iommu is not on"; fail=1
fi

# The edu whose parent in the device tree is $1 (a bridge, or pci0000:00).
edu_under() {
    for d in /sys/bus/pci/devices/*; do
        [ "$(cat "$d/vendor"):$(cat "$d/device")" = "0x1234:0x11e8" ] || continue
        parent=$(basename "$(dirname "$(readlink -f "$d")")")
        [ "$parent" = "$1" ] && basename "$d"
    done
}
MAIN=$(edu_under 0000:00:02.0)
ROOTEDU=$(edu_under pci0000:00)
SHARED=$(edu_under 0000:00:04.0)
VIRTIO=0000:00:03.0
for d in /sys/bus/pci/devices/*; do
    a=$(basename "$d")
    say "pci $a $(cat "$d/vendor"):$(cat "$d/device") group $(basename "$(readlink "$d/iommu_group")") driver $(basename "$(readlink "$d/driver")" 2>/dev/null)"
done
say "main edu $MAIN, root-bus edu $ROOTEDU, shared-group edu $SHARED, virtio $VIRTIO"
[ -n "$MAIN" ] && [ -n "$ROOTEDU" ] && [ -n "$SHARED" ] || { say "devices missing"; fail=1; }

# Hands a device to vfio-pci: driver_override, unbind, drivers_probe.
bind_vfio() {
    dev=/sys/bus/pci/devices/$1
    echo vfio-pci > "$dev/driver_override"
    [ -e "$dev/driver" ] && echo "$1" > "$dev/driver/unbind"
    echo "$1" > /sys/bus/pci/drivers_probe
    drv=$(basename "$(readlink "$dev/driver")")
    say "$1 -> $drv, /dev/vfio/$(basename "$(readlink "$dev/iommu_group")")"
    [ "$drv" = vfio-pci ]
}

step errors edu_check errors "$MAIN" "$VIRTIO"
step bind-shared bind_vfio "$SHARED"
step not-viable edu_check not-viable "$SHARED"
step bind-root-edu bind_vfio "$ROOTEDU"
step no-reset edu_check no-reset "$ROOTEDU"
step bind-main bind_vfio "$MAIN"
step run edu_check run "$MAIN"
step bind-virtio bind_vfio "$VIRTIO"
step msix edu_check msix "$VIRTIO"

# The DMA to an unmapped IOVA in "run" must have been stopped by the IOMMU.
faults=$(dmesg | grep -i 'DMAR.*fault' | head -3)
echo "$faults"
dmar_fault() { [ -n "$faults" ]; }
step iommu-fault dmar_fault

if [ "$fail" = 0 ]; then
    echo "RNIC-VM-RESULT: PASS"
else
    echo "RNIC-VM-RESULT: FAIL"
fi
