#!/bin/sh
# The PVRDMA VM test, guest side (busybox sh, run by tests/vm/init).
#
# QEMU gives the guest (see run.sh) slot 0x10: vmxnet3 as function 0 and
# pvrdma (15ad:0820) as function 1, one IOMMU group behind the emulated
# Intel IOMMU. Both functions go to vfio-pci (a group is usable only when
# every member is), and pvrdma_check drives the pvrdma function through
# rnic-vfio and rnic-pvrdma; then unmodified ibv_devinfo, ibv_rc_pingpong
# ibv_ud_pingpong and ibv_srq_pingpong run over rnic's drop-in libibverbs
# on it, against
# the host's servers. Prints "RNIC-VM-RESULT: PASS" when it passed.

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

# --registers: the second round prints its TraceHal trace, every register,
# command, response and WQE by name, into the log.
pvrdma_check --registers "$BDF" || fail=1

# Unmodified rdma-core programs over rnic's drop-in libibverbs, which
# drives the pvrdma function through rnic-vfio and rnic-pvrdma: first
# ibv_devinfo, then ping-pongs with the host peer's servers (run.sh,
# peer.py), their address exchange over the virtio-net (user networking,
# host at 10.0.2.2). The rounds come on the kernel command line.
arg() { tr ' ' '\n' < /proc/cmdline | sed -n "s/^rnic\.$1=//p"; }
export LD_LIBRARY_PATH=/usr/lib/rnic RNIC_DEVICES="name=pvrdma0,vfio=$BDF"
# The drop-in's log (env_logger), from run.sh's RNIC_PVRDMA_LOG.
[ -n "$(arg log)" ] && export RUST_LOG="$(arg log)"
if ibv_devinfo -v -d pvrdma0 >/tmp/devinfo.out 2>&1 &&
    grep -q 'hca_id:.*pvrdma0' /tmp/devinfo.out &&
    grep -q 'vendor_id:.*0x15ad' /tmp/devinfo.out &&
    grep -q 'vendor_part_id:.*2080' /tmp/devinfo.out &&
    grep -q 'phys_state:.*LINK_UP' /tmp/devinfo.out &&
    grep -q 'link_layer:.*Ethernet' /tmp/devinfo.out &&
    grep -qi 'GID\[ *0\]:.*fe80:' /tmp/devinfo.out; then
    echo "ok   guest: ibv_devinfo -v lists pvrdma0 (15ad:0820, link up, Ethernet, GID 0 link-local)"
else
    sed 's/^/  devinfo: /' /tmp/devinfo.out
    echo "FAIL guest: ibv_devinfo -v -d pvrdma0"
    fail=1
fi

for m in virtio_pci virtio_net; do modprobe "$m" || { say "modprobe $m failed"; fail=1; }; done
NET=
for n in /sys/class/net/*; do
    [ "$(basename "$(readlink "$n/device/driver")" 2>/dev/null)" = virtio_net ] && NET=$(basename "$n")
done
say "out-of-band interface ${NET:-missing}"
ip link set "$NET" up && ip addr add 10.0.2.15/24 dev "$NET" && ip route add default via 10.0.2.2 ||
    fail=1

# One client per round, started again until the host's server for that
# round listens (the peer starts them one after another). A round is
# PROGRAM:PORT:SIZE:ITERS[:e]; -c checks every byte received.
for round in $(arg rounds | tr ',' ' '); do
    prog=$(echo "$round" | cut -d: -f1)
    port=$(echo "$round" | cut -d: -f2)
    size=$(echo "$round" | cut -d: -f3)
    iters=$(echo "$round" | cut -d: -f4)
    mode=$(echo "$round" | cut -d: -f5)
    set -- "ibv_${prog}_pingpong" -d pvrdma0 -g 0 -c -r 32 -n "$iters" -s "$size" -p "$port"
    [ "$prog" = srq ] && set -- "$@" -q 4
    [ "$mode" = e ] && set -- "$@" -e
    ok=0
    for try in $(seq 150); do
        timeout 90 "$@" 10.0.2.2 >/tmp/pp.out 2>&1 && ok=1 && break
        grep -q "Couldn't connect" /tmp/pp.out || break
        sleep 1
    done
    sed 's/^/  client: /' /tmp/pp.out
    if [ "$ok" = 1 ] && grep -q "^$iters iters in" /tmp/pp.out; then
        echo "ok   guest: $*"
    else
        echo "FAIL guest: $* (try $try)"
        fail=1
    fi
done
dmesg | grep -iE 'DMAR.*fault|vfio' | tail -5

if [ "$fail" = 0 ]; then echo "RNIC-VM-RESULT: PASS"; else echo "RNIC-VM-RESULT: FAIL"; fi
