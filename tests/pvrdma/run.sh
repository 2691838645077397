#!/usr/bin/env bash
# The PVRDMA VM test: proves rnic-pvrdma against a device this project did
# not write, QEMU 7.2's pvrdma (VMware's paravirtual RDMA adapter, PCI
# 15ad:0820), through the guest kernel's VFIO. Boots the host's Debian
# kernel under QEMU (TCG) on q35 with an emulated Intel IOMMU, vmxnet3 and
# pvrdma as two functions of one slot, and guest RAM shared (pvrdma refuses
# private RAM). QEMU's pvrdma executes the guest's verbs on a host ibverbs
# device: here an rnic NIC, opened by QEMU through rnic's drop-in
# libibverbs. Its MAD chardev is served by tests/pvrdma/mad_mux.py. The
# guest binds the function to vfio-pci and runs pvrdma/examples/
# pvrdma_check.rs (its second round traced by TraceHal, printed; a third
# under FaultHal), then unmodified ibv_devinfo, ibv_rc_pingpong (polling
# and on CQ events, several sizes) and ibv_ud_pingpong over rnic's drop-in
# libibverbs, against servers on the host (tests/pvrdma/peer.py) whose
# rnic NIC is on a UDP wire to QEMU's backend NIC (tests/pvrdma/guest.sh).
# The test passes when every check of both sides passed and the guest
# prints "RNIC-VM-RESULT: PASS"; it fails on anything else or on timeout.
#
# QEMU 9.1 removed pvrdma: with such a QEMU the test fails and says so.
#
# Usage: tests/pvrdma/run.sh
# Environment:
#   RNIC_VM_TIMEOUT  seconds before the VM is killed (default 600)
#   RNIC_VM_KERNEL   kernel version to boot (default: the newest in /boot
#                    that has the vfio-pci module)
#   RNIC_VM_KERNEL_IMAGE  its image (default /boot/vmlinuz-$RNIC_VM_KERNEL)
#   RNIC_VM_WORK     work directory (default target/vm-pvrdma)
#   RNIC_PVRDMA_ROUNDS  the ping-pong rounds, PROGRAM:SIZE:ITERS[:e] each
#                    (default: RC polling and on events, 1 B to 16 KiB; UD)
#   RNIC_PVRDMA_LOG  RUST_LOG for the guest's programs (the drop-in's log,
#                    e.g. rnic_pvrdma=trace), printed with their output
#   RNIC_VM_QEMU_ARGS  more QEMU arguments, e.g. "-trace pvrdma_post_cqe"
#                    (trace lines go to QEMU's stderr)
# Needs what tests/vm/run.sh needs (scripts/setup.sh installs it), and
# python3 for the MAD stand-in and the host peer, ibverbs-utils
# (ibv_devinfo, ibv_rc_pingpong, ibv_ud_pingpong) and ss.
set -euo pipefail
export PATH=$PATH:/usr/sbin:/sbin

repo=$(cd "$(dirname "$0")/../.." && pwd)
here=$repo/tests/pvrdma
vm=$repo/tests/vm
work=${RNIC_VM_WORK:-$repo/target/vm-pvrdma}
timeout_s=${RNIC_VM_TIMEOUT:-600}
mkdir -p "$work"
die() { echo "pvrdma-test: $*" >&2; echo "pvrdma-test: FAIL"; exit 1; }

for tool in qemu-system-x86_64 cpio depmod modprobe gzip python3; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool not found; run scripts/setup.sh"
done
qemu-system-x86_64 -device help 2>/dev/null | grep -q '"pvrdma"' ||
    die "$(qemu-system-x86_64 --version | head -1) has no pvrdma device (QEMU removed it in 9.1); this test needs QEMU 7.2 to 9.0, as Debian 12's qemu-system-x86"

. "$vm/kernel.sh"
kver=$(vm_kernel vfio-pci)
[ -n "$kver" ] && [ -d "/lib/modules/$kver" ] || die "no kernel in /boot with VFIO modules; install linux-image-amd64 (scripts/setup.sh)"
kimage=${RNIC_VM_KERNEL_IMAGE:-/boot/vmlinuz-$kver}
[ -r "$kimage" ] || die "$kimage is not readable by $(id -un)"
echo "pvrdma-test: kernel $kver, $(qemu-system-x86_64 --version | head -1)"

echo "pvrdma-test: building pvrdma_check (static, release)"
guest_target=$repo/target/vm/cargo
(cd "$repo" && CARGO_TARGET_DIR=$guest_target RUSTFLAGS="-C target-feature=+crt-static" \
    cargo build --quiet --release --target x86_64-unknown-linux-gnu \
    -p rnic-pvrdma --example pvrdma_check)
guest_bins=$guest_target/x86_64-unknown-linux-gnu/release/examples
[ -x "$guest_bins/pvrdma_check" ] || die "no $guest_bins/pvrdma_check after the build"
for b in ibv_devinfo ibv_rc_pingpong ibv_ud_pingpong ibv_srq_pingpong; do
    [ -x "/usr/bin/$b" ] || die "/usr/bin/$b not found; run scripts/setup.sh (ibverbs-utils)"
done

echo "pvrdma-test: building the drop-in libibverbs (release): the guest's, QEMU's backend's, the host peer's"
ibverbs_lib=$(cd "$repo" && bash ibverbs/build.sh --release)

initrd=$work/initramfs.cpio.gz
bash "$vm/build-initramfs.sh" "$kver" "$initrd" "$here/guest.sh" \
    mod:vfio mod:vfio_iommu_type1 mod:vfio_pci mod:virtio_pci mod:virtio_net \
    "bin:$guest_bins/pvrdma_check=/usr/bin/pvrdma_check" \
    "bin:$ibverbs_lib=/usr/lib/rnic/libibverbs.so.1" \
    bin:/usr/bin/ibv_devinfo bin:/usr/bin/ibv_rc_pingpong bin:/usr/bin/ibv_ud_pingpong \
    bin:/usr/bin/ibv_srq_pingpong

# Ports on 127.0.0.1: QEMU's backend NIC's end of the wire, and one TCP
# port per round for the host's server, which the guest reaches as
# 10.0.2.2 through user networking: the first free block from a start that
# depends on the PID. The peer's end of the wire is bound by peer.py on a
# port the kernel picks, and kept for every round.
rounds_n=5
in_use() { ss -Hltun "sport = :$1" | grep -q .; }
base=$((30000 + ($$ % 1000) * 8))
for _ in $(seq 100); do
    busy=0
    for p in $(seq "$base" $((base + rounds_n))); do in_use "$p" && busy=1; done
    [ "$busy" = 0 ] && break
    base=$((base + 8))
done
wire_qemu=$base pp=$((base + 1))
# Rounds of PROGRAM:SIZE:ITERS[:e] (RNIC_PVRDMA_ROUNDS, at most
# $rounds_n), each given its TCP port: RC polling and on CQ events at
# several sizes (beyond QEMU's MTU of 1024 too), UD within one MTU, and
# four RC QPs on one SRQ.
shapes=${RNIC_PVRDMA_ROUNDS:-rc:4096:50 rc:1:100:e rc:16384:20:e ud:512:50 srq:4096:20}
rounds= port=$pp
for shape in $shapes; do
    prog=${shape%%:*}
    rounds="$rounds $prog:$port:${shape#*:}"
    port=$((port + 1))
done

mux_log=$work/mad-mux.log
# A socket left by an earlier run would pass for the new one.
rm -f "$work/mad.sock"
python3 -u "$here/mad_mux.py" "$work/mad.sock" >"$mux_log" 2>&1 &
mux=$!
trap 'kill $mux 2>/dev/null || true' EXIT
for _ in $(seq 50); do [ -S "$work/mad.sock" ] && break; sleep 0.1; done
[ -S "$work/mad.sock" ] || die "the MAD stand-in did not start (see $mux_log)"

# The host peer: unmodified ibv_rc_pingpong and ibv_ud_pingpong servers
# over rnic's drop-in libibverbs, one per round.
peer_log=$work/peer.log
rm -f "$work/peer.port"
# shellcheck disable=SC2086
python3 -u "$here/peer.py" "$(dirname "$ibverbs_lib")" "127.0.0.1:$wire_qemu" "$work/peer.port" \
    120 $rounds >"$peer_log" 2>&1 &
peer=$!
trap 'kill $mux $peer 2>/dev/null || true' EXIT
for _ in $(seq 50); do [ -s "$work/peer.port" ] && break; sleep 0.1; done
[ -s "$work/peer.port" ] || die "the host peer did not start (see $peer_log)"
wire_peer=$(cat "$work/peer.port")

# QEMU's backend: one rnic NIC with the vmxnet3's MAC, on the wire to the
# peer.
bios=()
[ -r /usr/share/qemu/qboot.rom ] && bios=(-bios /usr/share/qemu/qboot.rom)
log=$work/serial.log
qemu_err=$work/qemu.stderr
echo "pvrdma-test: booting (TCG, timeout ${timeout_s} s); serial log in $log, QEMU's stderr in $qemu_err"
set +e
RNIC_DEVICES="name=rnic0,mac=52:54:00:12:34:10,ipv4=10.0.2.15,wire=udp:127.0.0.1:$wire_qemu=127.0.0.1:$wire_peer" \
LD_LIBRARY_PATH=$(dirname "$ibverbs_lib") \
timeout -k 5 "$timeout_s" qemu-system-x86_64 \
    -machine q35,kernel-irqchip=split -accel tcg -cpu max -smp 1 -m 1024 \
    "${bios[@]}" -nographic -nodefaults -no-reboot -serial stdio \
    -kernel "$kimage" -initrd "$initrd" \
    -append "console=ttyS0 panic=-1 loglevel=1 intel_iommu=on hugepages=16 rnic.rounds=$(echo $rounds | tr ' ' ',') ${RNIC_PVRDMA_LOG:+rnic.log=$RNIC_PVRDMA_LOG}" \
    -device intel-iommu,intremap=on \
    -object memory-backend-ram,id=ram0,size=1024M,share=on -numa node,memdev=ram0 \
    -netdev user,id=n0 \
    -device vmxnet3,netdev=n0,mac=52:54:00:12:34:10,addr=10.0,multifunction=on,romfile= \
    -chardev socket,path="$work/mad.sock",id=mads \
    -device pvrdma,addr=10.1,ibdev=rnic0,netdev=eth0,mad-chardev=mads \
    -netdev user,id=oob -device virtio-net-pci,netdev=oob,addr=3.0,romfile= \
    ${RNIC_VM_QEMU_ARGS:-} </dev/null 2>"$qemu_err" | sed -u 's/\r$//' | tee "$log"
rc=${PIPESTATUS[0]}
set -e

# The last server ends with the guest's last client; a peer still waiting
# then had a round the guest never ran.
for _ in $(seq 100); do kill -0 "$peer" 2>/dev/null || break; sleep 0.1; done
kill "$peer" 2>/dev/null || true
peer_rc=0
wait "$peer" 2>/dev/null || peer_rc=$?
echo "pvrdma-test: the host peer (exit $peer_rc):"
tee -a "$log" <"$peer_log"
[ "$peer_rc" = 0 ] || echo "FAIL host: the peer exited with $peer_rc" | tee -a "$log"

passed=$(grep -c '^ok ' "$log" || true)
failed=$(grep -c '^FAIL ' "$log" || true)
echo "pvrdma-test: guest checks: $passed ok, $failed failed"
[ "$rc" = 124 ] || [ "$rc" = 137 ] && die "timed out after ${timeout_s} s"
if grep -qx 'RNIC-VM-RESULT: PASS' "$log" && [ "$failed" = 0 ] && [ "$passed" -gt 0 ]; then
    echo "pvrdma-test: PASS"
    exit 0
fi
[ "$rc" = 0 ] || echo "pvrdma-test: qemu exited with status $rc" >&2
[ -s "$qemu_err" ] && { echo "pvrdma-test: QEMU's stderr ends with:" >&2; tail -8 "$qemu_err" >&2; }
die "the guest did not report RNIC-VM-RESULT: PASS (see $log)"
