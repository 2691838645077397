#!/bin/sh
# The PVRDMA VM test, guest side (busybox sh, run by tests/vm/init).
#
# QEMU gives the guest (see run.sh) slot 0x10: vmxnet3 as function 0 and
# pvrdma (15ad:0820) as function 1, one IOMMU group behind the emulated
# Intel IOMMU. Both functions go to vfio-pci (a group is usable only when
# every member is), and pvrdma_check drives the pvrdma function through
# rnic-vfio and rnic-pvrdma. Prints "RNIC-VM-RESULT: PASS" when it passed.

fail=0
say() { echo "rnic-vm: $*"; }

say "kernel $(uname -r)"
for m in vfio_iommu_type1 vfio_pci; do
    # busybox modprobe ignores softdeps: vfio_iommu_type1 is loaded by hand
    modprobe "$m" || { say "modprobe $m failed"; fail=1; }
done

PV=
for d in /sys/bus/pci/devices/*; do
    [ "$(cat "$d/vendor"):$(cat "$d/device")" = 0x15ad:0x0820 ] && PV=$d
done
[ -n "$PV" ] || { say "no pvrdma function (15ad:0820)"; echo "RNIC-VM-RESULT: FAIL"; exit 1; }
BDF=$(basename "$PV")
GROUP=$(basename "$(readlink "$PV/iommu_group")")
say "pvrdma $BDF in IOMMU group $GROUP: $(ls /sys/kernel/iommu_groups/"$GROUP"/devices | tr '\n' ' ')"
for a in $(ls /sys/kernel/iommu_groups/"$GROUP"/devices); do
    d=/sys/bus/pci/devices/$a
    echo vfio-pci > "$d/driver_override"
    [ -e "$d/driver" ] && echo "$a" > "$d/driver/unbind"
    echo "$a" > /sys/bus/pci/drivers_probe
    drv=$(basename "$(readlink "$d/driver")" 2>/dev/null)
    say "$a bound to ${drv:-nothing}"
    [ "$drv" = vfio-pci ] || fail=1
done

pvrdma_check "$BDF" || fail=1
dmesg | grep -iE 'DMAR.*fault|vfio' | tail -5

if [ "$fail" = 0 ]; then echo "RNIC-VM-RESULT: PASS"; else echo "RNIC-VM-RESULT: FAIL"; fi
