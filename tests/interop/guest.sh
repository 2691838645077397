#!/bin/sh
# The rxe interop test, guest side (busybox sh, run by /init; see run.sh).
#
# QEMU gives the guest two virtio-net NICs, told apart by their MACs:
#   52:54:00:12:34:01  QEMU user networking: the out-of-band TCP of the
#                      ping-pongs and this script's command agent
#                      (10.0.2.15; the host is 10.0.2.2);
#   52:54:00:12:34:02  the RoCE wire, one Ethernet frame per UDP datagram to
#                      the host's rnic NIC (192.0.2.2/24, MTU 9000 so that
#                      rxe's active MTU is 4096), with rxe0 on it.
# Then it serves commands from the host on TCP port 7000, one per
# connection ("rnic-agent: start", the command's output, then
# "rnic-agent: exit N"), until the
# host creates /tmp/stop.
# Debian's busybox runs its own applets before $PATH: the iproute2 tools
# are called by their full paths.
IP=/usr/sbin/ip
RDMA=/usr/bin/rdma
say() { echo "rnic-interop: $*"; }

say "kernel $(uname -r), $(grep -c ^processor /proc/cpuinfo) CPU(s)"
for m in crc32_generic udp_tunnel ip6_udp_tunnel ib_core ib_uverbs ib_cm iw_cm rdma_cm rdma_ucm \
    rdma_rxe virtio_pci virtio_net; do
    modprobe "$m" || say "modprobe $m failed"
done
nic_with_mac() {
    for n in /sys/class/net/*; do
        [ "$(cat "$n/address")" = "$1" ] && basename "$n"
    done
}
OOB=$(nic_with_mac 52:54:00:12:34:01)
WIRE=$(nic_with_mac 52:54:00:12:34:02)
say "out-of-band NIC $OOB, wire NIC $WIRE"
for n in "$OOB" "$WIRE"; do
    # DAD off: the link-local address (rxe's GID 0) is usable at once.
    sysctl -qw "net.ipv6.conf.$n.accept_dad=0"
done
$IP link set lo up
$IP link set "$OOB" up
$IP addr add 10.0.2.15/24 dev "$OOB"
$IP link set "$WIRE" mtu 9000 up
$IP addr add 192.0.2.2/24 dev "$WIRE"
$RDMA link add rxe0 type rxe netdev "$WIRE" || say "rdma link add failed"
for i in 0 1 2 3; do
    g=/sys/class/infiniband/rxe0/ports/1/gids/$i
    [ -e "$g" ] && say "rxe0 gid $i $(cat "$g") $(cat /sys/class/infiniband/rxe0/ports/1/gid_attrs/types/$i 2>/dev/null)"
done
say "rxe0 $(cat /sys/class/infiniband/rxe0/ports/1/state) active_mtu $(ibv_devinfo -d rxe0 | sed -n 's/.*active_mtu:[[:space:]]*//p')"

cat > /tmp/agent.sh <<'EOF'
#!/bin/sh
# One command from the host: read a line, run it, report its status.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
# Waits until something listens on TCP port $1.
listening() {
    for _ in $(seq 300); do
        netstat -ltn | grep -q ":$1 " && return 0
        sleep 0.1
    done
    echo "nothing listens on port $1"; return 1
}
echo "rnic-agent: start"
read -r cmd
eval "$cmd" </dev/null 2>&1
echo "rnic-agent: exit $?"
EOF
chmod +x /tmp/agent.sh
nc -ll -p 7000 -e /tmp/agent.sh &
say ready
while [ ! -e /tmp/stop ]; do sleep 0.2; done
say "stopping"
