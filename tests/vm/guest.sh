#!/bin/sh
# The VFIO VM test, guest side (busybox sh, run by /init).
#
# QEMU gives the guest (see run.sh):
#   00:02.0 pcie-root-port, with an edu behind it: the main device (it can be
#           reset: the kernel resets its secondary bus);
#   00:01.0 edu on the root bus: no reset method;
#   00:03.0 virtio-rng-pci: bound to virtio-pci, then to vfio-pci for MSI-X;
#   00:04.0 pci-bridge with an edu and a virtio-rng-pci behind it: one IOMMU
#           group, not viable while the virtio device keeps its driver, then
#           both on vfio-pci, each with its own VfioHal in one container.
# Prints "RNIC-VM-RESULT: PASS" at the end when every step passed. The
# kernel runs with loglevel=1, so its messages stay off the console (and out
# of the check lines); they are read with dmesg.

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

# The device with IDs $1 whose parent in the device tree is $2 (a bridge,
# or pci0000:00).
dev_under() {
    for d in /sys/bus/pci/devices/*; do
        [ "$(cat "$d/vendor"):$(cat "$d/device")" = "$1" ] || continue
        parent=$(basename "$(dirname "$(readlink -f "$d")")")
        [ "$parent" = "$2" ] && basename "$d"
    done
}
EDU=0x1234:0x11e8
MAIN=$(dev_under $EDU 0000:00:02.0)
ROOTEDU=$(dev_under $EDU pci0000:00)
SHARED=$(dev_under $EDU 0000:00:04.0)
SHAREDVIRTIO=$(dev_under 0x1af4:0x1005 0000:00:04.0)
VIRTIO=0000:00:03.0
for d in /sys/bus/pci/devices/*; do
    a=$(basename "$d")
    say "pci $a $(cat "$d/vendor"):$(cat "$d/device") group $(basename "$(readlink "$d/iommu_group")") driver $(basename "$(readlink "$d/driver")" 2>/dev/null)"
done
say "main edu $MAIN, root-bus edu $ROOTEDU, shared group: edu $SHARED virtio $SHAREDVIRTIO, virtio $VIRTIO"
[ -n "$MAIN" ] && [ -n "$ROOTEDU" ] && [ -n "$SHARED" ] && [ -n "$SHAREDVIRTIO" ] ||
    { say "devices missing"; fail=1; }

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

# Runs "$@" with its output in the file $1 too (shown when it ends).
logged() {
    out=$1; shift
    "$@" >"$out" 2>&1
    rc=$?
    cat "$out"
    return $rc
}

# Opens the group of $1 in a subshell (another process than edu_check),
# then has edu_check open $1. (edu_check must not be the subshell's last
# command: ash would exec it in the subshell's place, dropping the fd.)
group_held() {
    g=$(basename "$(readlink "/sys/bus/pci/devices/$1/iommu_group")")
    (
        exec 3<>"/dev/vfio/$g" || exit 1
        edu_check busy "$1" 3<&-
        rc=$?
        exec 3<&-
        exit $rc
    )
}

step errors edu_check errors "$MAIN" "$VIRTIO"
step bind-shared bind_vfio "$SHARED"
step not-viable edu_check not-viable "$SHARED"
step bind-shared-virtio bind_vfio "$SHAREDVIRTIO"
step shared edu_check shared "$SHARED" "$SHAREDVIRTIO"
step bind-root-edu bind_vfio "$ROOTEDU"
step no-reset edu_check no-reset "$ROOTEDU"
step busy group_held "$ROOTEDU"
step bind-main bind_vfio "$MAIN"
step run logged /tmp/run.out edu_check run "$MAIN"
step middleware edu_check middleware "$MAIN"
# rnic's drop-in libibverbs lists a device bound to vfio-pci beside an
# emulated one, and opens it through VFIO: an edu is no rnic, so bring-up
# refuses it (the ID register), and ibv_devinfo fails; the emulated device
# opens.
ibverbs_vfio() (
    export LD_LIBRARY_PATH=/usr/lib/rnic RNIC_DEVICES="name=real0,vfio=$MAIN;name=emu1"
    ibv_devices >/tmp/devs.out 2>&1
    cat /tmp/devs.out
    grep -q 'real0.*0000000000000000' /tmp/devs.out && grep -q 'emu1' /tmp/devs.out || return 1
    ibv_devinfo -d real0 >/tmp/real.out 2>&1
    rc=$?
    cat /tmp/real.out
    [ "$rc" != 0 ] && grep -q "real0: .*not the rnic magic" /tmp/real.out || return 1
    ibv_devinfo -d emu1 >/tmp/emu.out 2>&1 || { cat /tmp/emu.out; return 1; }
    grep -q PORT_ACTIVE /tmp/emu.out
)
step ibverbs-vfio ibverbs_vfio
step bind-virtio bind_vfio "$VIRTIO"
step msix edu_check msix "$VIRTIO"

# The DMA to an unmapped IOVA in "run" must have been stopped by the IOMMU:
# the kernel logs a fault for that device and that IOVA page.
expect=$(sed -n 's/^ *expect DMAR fault: //p' /tmp/run.out | head -1)
say "DMAR faults logged:"
dmesg | grep 'DMAR.*fault addr' | head -5
dmar_fault() {
    say "looking for: $expect"
    [ -n "$expect" ] && dmesg | grep -qF "$expect ["
}
step iommu-fault dmar_fault

if [ "$fail" = 0 ]; then
    echo "RNIC-VM-RESULT: PASS"
else
    echo "RNIC-VM-RESULT: FAIL"
fi
