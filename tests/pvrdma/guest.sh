#!/bin/sh
# The PVRDMA VM test, guest side (busybox sh, run by tests/vm/init).
#
# QEMU gives the guest (see run.sh) slot 0x10: vmxnet3 as function 0 and
# pvrdma (15ad:0820) as function 1, one IOMMU group behind the emulated
# Intel IOMMU. Both functions go to vfio-pci (a group is usable only when
# every member is), and pvrdma_check drives the pvrdma function through
# rnic-vfio and rnic-pvrdma; then pvrdma_pingpong ping-pongs RC SENDs with
# ibv_rc_pingpong on the host. Prints "RNIC-VM-RESULT: PASS" when it passed.

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

# Traffic: an RC ping-pong with the host's ibv_rc_pingpong server, whose
# address exchange goes over the virtio-net (user networking, host at
# 10.0.2.2); the parameters come on the kernel command line.
for m in virtio_pci virtio_net; do modprobe "$m" || { say "modprobe $m failed"; fail=1; }; done
arg() { tr ' ' '\n' < /proc/cmdline | sed -n "s/^rnic\.$1=//p"; }
NET=
for n in /sys/class/net/*; do
    [ "$(basename "$(readlink "$n/device/driver")" 2>/dev/null)" = virtio_net ] && NET=$(basename "$n")
done
say "out-of-band interface ${NET:-missing}"
ip link set "$NET" up && ip addr add 10.0.2.15/24 dev "$NET" && ip route add default via 10.0.2.2 ||
    fail=1
# With events, as ibv_rc_pingpong -e: the CQ armed (ARM|ARM_SOL), MSI-X
# vector 2 waited for, the CQ-notification ring read, the CQ polled.
if pvrdma_pingpong "$BDF" "10.0.2.2:$(arg pp)" "$(arg iters)" "$(arg size)" events; then
    echo "ok   guest: RC ping-pong of $(arg iters) × $(arg size) B with the host's ibv_rc_pingpong, on CQ events"
else
    fail=1
fi
dmesg | grep -iE 'DMAR.*fault|vfio' | tail -5

if [ "$fail" = 0 ]; then echo "RNIC-VM-RESULT: PASS"; else echo "RNIC-VM-RESULT: FAIL"; fi
