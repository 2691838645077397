#!/usr/bin/env python3
"""RDMA CM variant (IB CM MADs on QP1 over RoCEv2, driven by librdmacm tools) of the golden RoCEv2 capture rig: two QEMU/TCG guests running the real rdma_rxe driver, joined by a
host relay that forwards every Ethernet frame A<->B and records it in pcap files.

   guest A (client)  eth0 virtio-net --netdev dgram-- 127.0.0.1:41001 <-> relay 127.0.0.1:41000
   guest B (server)  eth0 virtio-net --netdev dgram-- 127.0.0.1:41003 <-> relay 127.0.0.1:41002

The relay (a thread here) gets one Ethernet frame per UDP datagram, writes it to
out/session_all.pcap and to the pcap of the test currently running, then sends it to the other
guest.  The guests are driven over their serial consoles (QEMU -serial stdio on pipes): /init in
the initramfs is a command agent that evals each line and prints "@@END rc@@", so no control
traffic touches the wire; the host knows exactly when each test starts and ends and switches the
per-test pcap accordingly.  Connection setup is done by the kernel RDMA CM (rdma_cm + ib_cm MADs on QP1).

Usage: golden.py [TEST ...]      (default: all tests in TESTS; see --list)
"""
import os, queue, select, socket, struct, subprocess, sys, threading, time, json, re

G = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))     # CAPTURE_DIR
OUT = os.environ.get("GOLDEN_OUT", os.path.join(G, "out"))
KV = sorted(os.listdir("/lib/modules"))[-1]
INITRD = os.path.join(G, "build", "initramfs.cpio.gz")

A = dict(name="A", mac="52:54:00:00:00:0a", ip4="192.0.2.10", relay=41000, qemu=41001)
B = dict(name="B", mac="52:54:00:00:00:14", ip4="192.0.2.20", relay=41002, qemu=41003)
MTU = 9000              # netdev MTU; rxe then reports active_mtu 4096, tests pick -m explicitly


def ll6(mac):           # EUI-64 link-local address derived from a MAC
    b = bytes.fromhex(mac.replace(":", ""))
    e = bytes([b[0] ^ 2]) + b[1:3] + b"\xff\xfe" + b[3:]
    return socket.inet_ntop(socket.AF_INET6, b"\xfe\x80" + b"\0" * 6 + e)


A["ip6"], B["ip6"] = ll6(A["mac"]), ll6(B["mac"])

S4 = B["ip4"]
S6 = B["ip6"] + "%eth0"  # IPv6 link-local needs a scope id
# RDMA CM tests: name -> server command on B (None = no server), client command on A, timeout s,
# expected client outcome ("ok" = exit 0, "fail" = the test provokes an error on purpose), note
TESTS = [
    dict(name="rping", srv=f"rping -s -a {S4} -v -V -C 3 -S 64", cli=f"rping -c -a {S4} -v -V -C 3 -S 64", tmo=180,
         note="rping (RC, RDMA_PS_TCP port 7174) over IPv4, 3 ping iterations with 64-byte buffers, data validation (-V)."),
    dict(name="ucmatose", srv=f"ucmatose -b {S4} -c 1 -C 2", cli=f"ucmatose -s {S4} -c 1 -C 2", tmo=180,
         note="ucmatose (RC, RDMA_PS_TCP port 7471) over IPv4, 1 connection, 2 SEND messages each way."),
    dict(name="udaddy", srv=f"udaddy -b {S4} -c 1 -C 2", cli=f"udaddy -s {S4} -c 1 -C 2", tmo=180,
         note="udaddy (UD, RDMA_PS_UDP port 7174): SIDR REQ/REP instead of REQ/REP/RTU, then 2 UD SENDs each way."),
    dict(name="rdma_server_client", srv=f"rdma_server -s {S4}", cli=f"rdma_client -s {S4}", tmo=180,
         note="rdma_server/rdma_client (librdmacm rdma_create_ep API, RC, RDMA_PS_TCP port 7471), one 16-byte SEND each way. "
              "Both sides call rdma_disconnect(), so depending on timing there is one DREQ/DREP pair or two crossed "
              "DREQs, each answered by a DREP."),
    dict(name="rping_ipv6", srv=f"rping -s -a {S6} -v -V -C 3 -S 64", cli=f"rping -c -a {S6} -v -V -C 3 -S 64", tmo=180,
         note="rping over IPv6 link-local addresses (RoCEv2/IPv6, GID index 0), otherwise as rping."),
    dict(name="rping_rej_no_listener", srv=None, cli=f"rping -c -a {S4} -p 7999 -v -C 1 -S 64", tmo=120, expect="fail",
         note="(extra) rping client to a port with no listener on B: B's ib_cm answers the REQ with REJ (reason 8 = invalid service ID); rping reports RDMA_CM_EVENT_REJECTED, error 8 and exits 255."),
    dict(name="udaddy_no_listener", srv=None, cli=f"udaddy -s {S4} -c 1 -C 1", tmo=120, expect="fail",
         note="(extra) udaddy client to a port with no listener on B: B answers the SIDR REQ with SIDR REP status 1 (service ID not supported); udaddy reports RDMA_CM_EVENT_UNREACHABLE, error 1 and exits 1."),
]
TESTS += [
    dict(name="ucmatose_ipv6", srv=f"ucmatose -f ipv6 -b {S6} -c 1 -C 2", cli=f"ucmatose -f ipv6 -s {S6} -c 1 -C 2", tmo=180,
         note="(extra) ucmatose over IPv6 link-local addresses (RoCEv2/IPv6)."),
    dict(name="udaddy_ipv6", srv=f"udaddy -f ipv6 -b {S6} -c 1 -C 2", cli=f"udaddy -f ipv6 -s {S6} -c 1 -C 2", tmo=180,
         note="(extra) udaddy over IPv6 link-local addresses: SIDR REQ/REP with an IPv6 cma_hdr."),
    # CM error/recovery paths, provoked by the relay (fault = action, direction, kind, value, n-th)
    dict(name="fault_dup_req_mra", srv=f"ucmatose -b {S4} -c 1 -C 1", cli=f"ucmatose -s {S4} -c 1 -C 1", tmo=180,
         fault=("dup", "A->B", "cm", 0x0010, 1), want=r"B->A:MRA", tries=8,
         note="(extra, relay fault) the relay delivers the REQ twice (1 ms apart): B's ib_cm sees a duplicate REQ "
              "while rdma_cm holds the new connection in MRA_REQ_SENT (rdma_cm 'sends' a delayed MRA, "
              "CMA_CM_MRA_SETTING = delay flag | 24, on every incoming REQ) and answers it with an MRA (message "
              "MRAed = REQ, service timeout 24). Timing-dependent: if ucmatose has already accepted (REP_SENT) the "
              "duplicate is silently dropped, so the run is repeated (up to 8 times) until an MRA B->A is on the wire."),
    dict(name="fault_dup_rep_mra", srv=f"ucmatose -b {S4} -c 1 -C 1", cli=f"ucmatose -s {S4} -c 1 -C 1", tmo=180,
         fault=("dup", "B->A", "cm", 0x0013, 1, [0, 0.002, 0.001, 0.003]), want=r"A->B:MRA", tries=12,
         note="(extra, relay fault) the relay delivers the REP a second time 0-3 ms later: if A's ib_cm processes "
              "the duplicate while rdma_cm holds the connection in MRA_REP_SENT (before ucmatose has sent the RTU) "
              "it answers with an MRA (message MRAed = REP, service timeout 24), else it re-sends the RTU. "
              "Timing-dependent: repeated (delay cycling 0/2/1/3 ms) until an MRA A->B is on the wire."),
    dict(name="fault_dup_rep_rtu", srv=f"ucmatose -b {S4} -c 1 -C 1", cli=f"ucmatose -s {S4} -c 1 -C 1", tmo=180,
         fault=("dup", "B->A", "cm", 0x0013, 1, 0.010), want=r"A->B:RTU.*A->B:RTU", tries=8,
         note="(extra, relay fault) the relay delivers the REP a second time 10 ms later, after A has sent its RTU: "
              "A's ib_cm sees a duplicate REP in ESTABLISHED and re-sends the RTU (same TID)."),
    dict(name="fault_rtu_lost", srv=f"ucmatose -b {S4} -c 1 -C 1", cli=f"ucmatose -s {S4} -c 1 -C 1", tmo=180,
         fault=("drop", "A->B", "cm", 0x0014, 1), want=r"B->A:REP.*B->A:REP.*A->B:RTU", tries=3,
         note="(extra, relay fault) the relay drops the RTU: B's ib_cm retransmits the REP (same TID) after its "
              "timeout and A (established) answers the duplicate REP with a new RTU."),
    dict(name="fault_drep_lost", srv=f"ucmatose -b {S4} -c 1 -C 1", cli=f"ucmatose -s {S4} -c 1 -C 1", tmo=180,
         fault=("drop", "A->B", "cm", 0x0016, 1), want=r"B->A:DREQ.*B->A:DREQ.*A->B:DREP", tries=3,
         note="(extra, relay fault) the relay drops the DREP (ucmatose: B sends the DREQ): B retransmits the DREQ "
              "(same TID) and A, in TIMEWAIT, answers it with a new DREP."),
]
LISTEN_WAIT = ("for i in $(seq 1 150); do rdma res show cm_id 2>/dev/null | grep -q LISTEN && break; "
               "kill -0 $SP 2>/dev/null || break; sleep 0.2; done; sleep 3; rdma res show cm_id | grep LISTEN")


class Pcap:
    def __init__(self, path):
        self.f = open(path, "wb")
        self.f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1))  # LINKTYPE_ETHERNET
        self.n = 0

    def write(self, ts, frame):
        self.f.write(struct.pack("<IIII", int(ts), int((ts % 1) * 1e6), len(frame), len(frame)) + frame)
        self.n += 1

    def close(self):
        self.f.close()


class Relay(threading.Thread):
    def __init__(self):
        super().__init__(daemon=True)
        self.sa = self._sock(A["relay"]); self.sb = self._sock(B["relay"])
        self.all = Pcap(os.path.join(OUT, "session_all.pcap"))
        self.cur = None; self.lock = threading.Lock(); self.stop = False
        self.drop = None; self.dropped = None; self.ndropped = 0
        self.count = {"A->B": 0, "B->A": 0}

    @staticmethod
    def _sock(port):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
        s.bind(("127.0.0.1", port))
        return s

    def open(self, name, fault=None, attempt=1):
        """fault = (action, direction, kind, value, n) acting on the n-th RoCEv2 frame (IPv4 or IPv6) in
        that direction whose BTH opcode (kind "bth") or CM attribute ID (kind "cm": UD SEND ONLY to QP1,
        MAD class 0x07) equals value.  action "drop": not forwarded, not in NAME.pcap, saved in
        NAME.dropped.pcap; action "dup": forwarded (and recorded) twice, fault[5] s apart (default 1 ms)."""
        with self.lock:
            self.cur = Pcap(os.path.join(OUT, name + ".pcap"))
            self.drop = fault; self.drop_seen = 0; self.ndropped = 0; self.nduped = 0; self.attempt = attempt
            self.dropped = Pcap(os.path.join(OUT, name + ".dropped.pcap")) if fault and fault[0] == "drop" else None

    def close(self):
        with self.lock:
            n = self.cur.n if self.cur else 0
            if self.cur:
                self.cur.close()
            if self.dropped:
                self.dropped.close()
            self.cur = None; self.drop = None; self.dropped = None
        return n

    @staticmethod
    def _roce(f):
        """-> (BTH offset) for RoCEv2 frames, else None"""
        if f[12:14] == b"\x08\x00" and len(f) > 42 and f[23] == 17 and f[36:38] == b"\x12\xb7":
            return 14 + (f[14] & 0xF) * 4 + 8
        if f[12:14] == b"\x86\xdd" and len(f) > 62 and f[20] == 17 and f[56:58] == b"\x12\xb7":
            return 62
        return None

    def _match(self, direction, f):
        d = self.drop
        if not d or direction != d[1] or self.drop_seen >= d[4]:
            return None
        o = self._roce(f)
        if o is None:
            return None
        if d[2] == "bth":
            hit = f[o] == d[3]
        else:   # CM MAD: UD SEND ONLY (0x64) to QP1, MAD after BTH(12)+DETH(8); class byte 1, attr ID bytes 16-17
            m = o + 20
            hit = (f[o] == 0x64 and f[o + 5:o + 8] == b"\0\0\x01" and len(f) >= m + 24 and f[m + 1] == 0x07
                   and int.from_bytes(f[m + 16:m + 18], "big") == d[3])
        if hit:
            self.drop_seen += 1
            if self.drop_seen == d[4]:
                return d[0]
        return None

    def run(self):
        while not self.stop:
            r, _, _ = select.select([self.sa, self.sb], [], [], 0.5)
            for s in r:
                frame = s.recv(65535)
                ts = time.time()
                direction = "A->B" if s is self.sa else "B->A"
                out, port = (self.sb, B["qemu"]) if s is self.sa else (self.sa, A["qemu"])
                with self.lock:
                    self.all.write(ts, frame)
                    act = self._match(direction, frame)
                    if act == "drop":
                        self.dropped.write(ts, frame); self.ndropped += 1
                        continue
                    if self.cur:
                        self.cur.write(ts, frame)
                out.sendto(frame, ("127.0.0.1", port)); self.count[direction] += 1
                if act == "dup":
                    dl = self.drop[5] if len(self.drop) > 5 else 0.001
                    if isinstance(dl, list):
                        dl = dl[(self.attempt - 1) % len(dl)]
                    if dl:
                        time.sleep(dl)
                    ts = time.time()
                    with self.lock:
                        self.all.write(ts, frame); self.nduped += 1
                        if self.cur:
                            self.cur.write(ts, frame)
                    out.sendto(frame, ("127.0.0.1", port)); self.count[direction] += 1
        self.all.close()


class VM:
    def __init__(self, cfg):
        self.cfg = cfg; self.name = cfg["name"]
        self.log = open(os.path.join(OUT, "logs", f"console_{self.name}.log"), "w")
        netdev = (f"dgram,id=w,remote.type=inet,remote.host=127.0.0.1,remote.port={cfg['relay']},"
                  f"local.type=inet,local.host=127.0.0.1,local.port={cfg['qemu']}")
        self.cmd = ["qemu-system-x86_64", "-machine", "q35,accel=tcg", "-cpu", "max", "-smp", "1",
                    "-m", "768", "-kernel", f"/boot/vmlinuz-{KV}", "-initrd", INITRD,
                    "-append", f"console=ttyS0 panic=-1 quiet loglevel=1 guest={self.name}",
                    "-display", "none", "-no-reboot", "-nodefaults", "-serial", "stdio",
                    "-bios", "/usr/share/qemu/qboot.rom",
                    "-device", f"virtio-net-pci,netdev=w,mac={cfg['mac']}", "-netdev", netdev]
        self.log.write("# " + " ".join(self.cmd) + "\n")
        self.t0 = time.time()
        self.p = subprocess.Popen(self.cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, bufsize=0)
        self.q = queue.Queue()
        threading.Thread(target=self._reader, daemon=True).start()

    def _reader(self):
        buf = b""
        while True:
            d = self.p.stdout.read1(4096) if hasattr(self.p.stdout, "read1") else os.read(self.p.stdout.fileno(), 4096)
            if not d:
                self.q.put(None); return
            buf += d
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                s = line.decode("utf-8", "replace").rstrip("\r")
                self.log.write(f"[{time.time() - self.t0:8.2f}] {s}\n"); self.log.flush()
                self.q.put(s)

    def wait_for(self, pat, timeout):
        end = time.time() + timeout; lines = []
        while time.time() < end:
            try:
                s = self.q.get(timeout=max(0.1, end - time.time()))
            except queue.Empty:
                break
            if s is None:
                raise RuntimeError(f"guest {self.name}: console closed")
            m = re.search(pat, s)
            if m:
                return m, lines
            lines.append(s)
        raise TimeoutError(f"guest {self.name}: no /{pat}/ within {timeout}s; last: {lines[-5:]}")

    def sh(self, cmd, timeout=60):
        self.log.write(f"[{time.time() - self.t0:8.2f}] >>> {cmd}\n"); self.log.flush()
        self.p.stdin.write((cmd + "\n").encode()); self.p.stdin.flush()
        m, lines = self.wait_for(r"@@END (\d+)@@$", timeout)
        pre = m.string[:m.start()]
        if pre:
            lines.append(pre)
        return int(m.group(1)), "\n".join(lines)

    def poweroff(self):
        try:
            self.p.stdin.write(b"sync; poweroff -f\n"); self.p.stdin.flush()
            self.p.stdin.close()
        except Exception:
            pass
        try:
            self.p.wait(30)
        except subprocess.TimeoutExpired:
            self.p.kill(); self.p.wait()


IP = "/usr/sbin/ip"      # busybox ash prefers its own 'ip' applet over $PATH
CNT = "grep . /sys/class/infiniband/rxe0/ports/1/hw_counters/* | sed 's,.*/,,' | tr '\\n' ' '"


def setup(vm, peer):
    c = vm.cfg; p = peer.cfg
    cmds = [
        "sysctl -qw net.ipv6.conf.eth0.accept_dad=0 net.ipv6.conf.eth0.router_solicitations=0",
        f"{IP} link set eth0 mtu {MTU} up",
        f"{IP} addr add {c['ip4']}/24 dev eth0",
        f"{IP} neigh replace {p['ip4']} lladdr {p['mac']} dev eth0 nud permanent",
        f"{IP} -6 neigh replace {p['ip6']} lladdr {p['mac']} dev eth0 nud permanent",
        "rdma link add rxe0 type rxe netdev eth0",
        "sleep 1; rdma link show; " + IP + " -br addr; " + IP + " neigh show",
        "for i in 0 1 2 3; do f=/sys/class/infiniband/rxe0/ports/1/gids/$i; [ -e $f ] && echo \"GID[$i] $(cat $f) $(cat /sys/class/infiniband/rxe0/ports/1/gid_attrs/types/$i)\"; done",
        "ibv_devinfo -d rxe0 | grep -E 'state|mtu|link_layer|guid'",
        "ls -l /dev/infiniband; lsmod | grep -E '^(rdma|ib_|iw_cm|configfs)'; cat /sys/class/misc/rdma_cm/abi_version",
        "rdma dev show; rdma res show cm_id; cat /proc/version",
    ]
    info = {}
    out_all = []
    for cmd in cmds:
        rc, out = vm.sh(cmd, 60)
        out_all.append(f"$ {cmd}\n{out}\n(rc={rc})")
        for m in re.finditer(r"GID\[(\d)\] (\S+) (.*)", out):
            info[m.group(2)] = int(m.group(1))
    # GID index per family
    gid4 = "0000:0000:0000:0000:0000:ffff:" + "%02x%02x:%02x%02x" % tuple(int(x) for x in c["ip4"].split("."))
    g = {}
    for gid, idx in info.items():
        if gid == gid4:
            g["v4"] = idx
        if gid.startswith("fe80:"):
            g["v6"] = idx
    return g, "\n".join(out_all)


def cm_sequence(pcap):
    """'A->B:REQ B->A:REP ...' for the CM MADs in pcap"""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import cm_decode
    macs = {(A["mac"], B["mac"]): "A->B", (B["mac"], A["mac"]): "B->A"}
    return " ".join("%s:%s" % (r["dir"], r["attr_name"]) for r in cm_decode.decode_file(pcap, macs)
                    if r.get("mgmt_class") == 7)


def main():
    import signal
    signal.signal(signal.SIGTERM, lambda *a: (_ for _ in ()).throw(KeyboardInterrupt()))
    names = [a for a in sys.argv[1:] if not a.startswith("-")]
    if "--list" in sys.argv:
        for t in TESTS:
            print(t["name"], ":", t["srv"], "|", t["cli"])
        return
    tests = [t for t in TESTS if not names or t["name"] in names]
    os.makedirs(os.path.join(OUT, "logs"), exist_ok=True)
    os.makedirs(os.path.join(OUT, "tool_output"), exist_ok=True)
    relay = Relay(); relay.start()
    va, vb = VM(A), VM(B)
    summary = {"kernel": KV, "A": A, "B": B, "netdev_mtu": MTU, "tests": []}
    try:
        for vm in (va, vb):
            m, _ = vm.wait_for(r"@@AGENT-READY uptime=(\S+)@@", 240)
            print(f"guest {vm.name} agent ready after {time.time() - vm.t0:.1f}s (guest uptime {m.group(1)})", flush=True)
        ga, oa = setup(va, vb); gb, ob = setup(vb, va)
        summary["gid_index"] = {"A": ga, "B": gb}
        open(os.path.join(OUT, "tool_output", "setup_A.txt"), "w").write(oa)
        open(os.path.join(OUT, "tool_output", "setup_B.txt"), "w").write(ob)
        print("GID indices A", ga, "B", gb, flush=True)
        work = [(t, 1) for t in tests]
        while work:
            t, attempt = work.pop(0)
            name, srv_cmd, cli_cmd, tmo = t["name"], t["srv"], t["cli"], t["tmo"]
            t_start = time.time()
            rec = {"name": name, "server_cmd_B": srv_cmd, "client_cmd_A": cli_cmd, "expect": t.get("expect", "ok"),
                   "note": t["note"], "attempt": attempt}
            _, rec["counters_A_before"] = va.sh(CNT); _, rec["counters_B_before"] = vb.sh(CNT)
            fault = t.get("fault")
            if fault:
                rec["relay_fault"] = {"action": fault[0], "direction": fault[1], "kind": fault[2],
                                      "value": "0x%04x" % fault[3], "nth": fault[4],
                                      "dup_delay_s": None if fault[0] != "dup" else
                                      (fault[5][(attempt - 1) % len(fault[5])] if len(fault) > 5 and isinstance(fault[5], list)
                                       else fault[5] if len(fault) > 5 else 0.001)}
            relay.open(name, fault, attempt)
            cout = sout = ""
            try:
                if srv_cmd:
                    rc, lout = vb.sh(f"( timeout {tmo} {srv_cmd} > /tmp/srv.out 2>&1; echo \"server rc=$?\" >> /tmp/srv.out ) & SP=$!; "
                                     + LISTEN_WAIT, 90)
                    rec["server_listening"] = rc == 0; rec["listen_ids_B"] = lout
                rc, cout = va.sh(f"timeout {tmo} {cli_cmd} 2>&1", tmo + 60)
                rec["client_rc"] = rc
                if srv_cmd:
                    _, sout = vb.sh("for i in $(seq 1 240); do kill -0 $SP 2>/dev/null || break; sleep 0.5; done; "
                                    "kill $SP 2>/dev/null; wait $SP 2>/dev/null; cat /tmp/srv.out", 180)
                    m = re.search(r"server rc=(\d+)", sout)
                    rec["server_rc"] = int(m.group(1)) if m else None
            except (TimeoutError, RuntimeError) as e:
                rec["error"] = str(e)
                print("  ERROR", e, flush=True)
            time.sleep(2.0)                       # trailing frames (DREQ/DREP retransmissions, if any)
            if fault:
                rec["relay_fault"]["dropped"] = relay.ndropped; rec["relay_fault"]["duplicated"] = relay.nduped
            rec["frames"] = relay.close()
            _, rec["counters_A_after"] = va.sh(CNT); _, rec["counters_B_after"] = vb.sh(CNT)
            _, rec["cm_ids_after_A"] = va.sh("rdma res show cm_id"); _, rec["cm_ids_after_B"] = vb.sh("rdma res show cm_id")
            rec["wall_s"] = round(time.time() - t_start, 1)
            with open(os.path.join(OUT, "tool_output", f"{name}.client_A.txt"), "w") as f:
                f.write(f"# guest A ({A['ip4']}): {cli_cmd}\n# rc={rec.get('client_rc')}\n{cout}\n")
            if srv_cmd:
                with open(os.path.join(OUT, "tool_output", f"{name}.server_B.txt"), "w") as f:
                    f.write(f"# guest B ({B['ip4']}): {srv_cmd}\n{sout}\n")
            if t.get("want"):
                rec["want"] = t["want"]
                rec["cm_sequence"] = cm_sequence(os.path.join(OUT, name + ".pcap"))
                rec["want_seen"] = bool(re.search(t["want"], rec["cm_sequence"]))
                if not rec["want_seen"] and attempt < t.get("tries", 1):
                    print(f"{name:22s} attempt {attempt}: /{rec['want']}/ not in '{rec['cm_sequence']}', repeating", flush=True)
                    summary.setdefault("discarded_attempts", []).append(rec)
                    work.insert(0, (t, attempt + 1))
                    continue
            summary["tests"].append(rec)
            print(f"{name:22s} frames {rec['frames']:4d} client rc {rec.get('client_rc')} server rc "
                  f"{rec.get('server_rc')} {rec['wall_s']}s (attempt {attempt})", flush=True)
            json.dump(summary, open(os.path.join(OUT, "logs", "run_summary.json"), "w"), indent=1)
    finally:
        for vm in (va, vb):
            vm.poweroff()
        relay.stop = True; relay.join(2)
        summary["relay_counts"] = relay.count
        json.dump(summary, open(os.path.join(OUT, "logs", "run_summary.json"), "w"), indent=1)
        print("relay counts", relay.count, flush=True)


if __name__ == "__main__":
    main()
