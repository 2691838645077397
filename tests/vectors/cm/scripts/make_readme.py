#!/usr/bin/env python3
"""Write out/README.txt, out/decode/*.txt, out/icrc_report.txt and out/summary.json for the RDMA CM
captures, from out/logs/run_summary.json, the pcaps, cm_decode.py, icrc_check.py and tshark."""
import collections, contextlib, io, json, os, re, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import icrc_check  # noqa: E402
import cm_decode  # noqa: E402

OUT = os.environ.get("GOLDEN_OUT", os.path.join(os.path.dirname(HERE), "out"))
S = json.load(open(os.path.join(OUT, "logs", "run_summary.json")))
A, B = S["A"], S["B"]
MACS = {(A["mac"], B["mac"]): "A->B", (B["mac"], A["mac"]): "B->A"}
DEC = os.path.join(OUT, "decode")

# tshark fields used to cross-check cm_decode.py (per frame)
TS_FIELDS = ["frame.number", "infiniband.bth.opcode", "infiniband.bth.destqp", "infiniband.deth.q_key",
             "infiniband.deth.srcqp", "infiniband.mad.mgmtclass", "infiniband.mad.method",
             "infiniband.mad.attributeid", "infiniband.mad.transactionid",
             "infiniband.cm.req", "infiniband.cm.rep", "infiniband.cm.rep.remotecommid",
             "infiniband.cm.rtu.localcommid", "infiniband.cm.rtu.remotecommid",
             "infiniband.cm.rej.localcommid", "infiniband.cm.rej.remotecommid",
             "infiniband.cm.dreq.localcommid", "infiniband.cm.dreq.remotecommid",
             "infiniband.cm.drsp.localcommid", "infiniband.cm.drsp.remotecommid"]


def sh(cmd):
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=120).stdout.strip()
    except Exception as e:  # noqa: BLE001
        return "?(%s)" % e


def tshark_rows(pcap):
    cmd = ["tshark", "-r", pcap, "-T", "fields", "-E", "separator=|", "-E", "occurrence=f"]
    for f in TS_FIELDS:
        cmd += ["-e", f]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    rows = {}
    for l in r.stdout.splitlines():
        v = l.split("|")
        rows[int(v[0])] = dict(zip(TS_FIELDS, v))
    m = subprocess.run(["tshark", "-r", pcap, "-Y", "_ws.malformed"], capture_output=True, text=True, timeout=120)
    e = subprocess.run(["tshark", "-r", pcap, "-q", "-z", "expert,error"], capture_output=True, text=True, timeout=120)
    errs = [" ".join(l.split()) for l in e.stdout.splitlines() if re.match(r"\s+\d+\s+\S", l)]
    return rows, "%d; tshark expert errors: %s" % (len(m.stdout.splitlines()), "; ".join(errs) or "none")


def hexint(s):
    s = (s or "").strip()
    if not s:
        return None
    return int(s, 16) if s.lower().startswith("0x") else int(s)


def cross_check(recs, rows):
    """Compare cm_decode.py with tshark for every CM frame; returns (n_checked, [mismatch strings])."""
    bad = []; n = 0
    for r in recs:
        if r.get("mgmt_class") is None:
            continue
        t = rows.get(r["no"], {})
        n += 1
        exp = {"infiniband.bth.opcode": r["opcode"], "infiniband.bth.destqp": r["dqpn"],
               "infiniband.deth.q_key": int(r["qkey"], 16), "infiniband.deth.srcqp": int(r["srcqp"], 16),
               "infiniband.mad.mgmtclass": r["mgmt_class"], "infiniband.mad.method": r["method"],
               "infiniband.mad.attributeid": r["attr_id"], "infiniband.mad.transactionid": int(r["tid"], 16)}
        a = r["attr_name"]; lc = r.get("local_comm_id"); rc = r.get("remote_comm_id")
        cid = {"REQ": [("infiniband.cm.req", lc)],
               "REP": [("infiniband.cm.rep", lc), ("infiniband.cm.rep.remotecommid", rc)],
               "RTU": [("infiniband.cm.rtu.localcommid", lc), ("infiniband.cm.rtu.remotecommid", rc)],
               "REJ": [("infiniband.cm.rej.localcommid", lc), ("infiniband.cm.rej.remotecommid", rc)],
               "DREQ": [("infiniband.cm.dreq.localcommid", lc), ("infiniband.cm.dreq.remotecommid", rc)],
               "DREP": [("infiniband.cm.drsp.localcommid", lc), ("infiniband.cm.drsp.remotecommid", rc)]}.get(a, [])
        for f, v in cid:
            exp[f] = int(v, 16)
        for f, v in exp.items():
            got = hexint(t.get(f))
            if got != v:
                bad.append("frame %d %s: %s tshark=%s cm_decode=%s" % (r["no"], a, f, t.get(f), v))
    return n, bad


def counters(s):
    return {k: int(v) for k, v in re.findall(r"(\w+):(\d+)", s or "")}


def tool_lines(path, maxn=14):
    if not os.path.exists(path):
        return []
    ls = [l for l in open(path).read().splitlines() if l.strip() and not l.startswith("#")]
    if len(ls) > maxn:
        ls = ls[:maxn - 1] + ["... (%d more lines)" % (len(ls) - maxn + 1)]
    return ls


def main():
    os.makedirs(DEC, exist_ok=True)
    r = io.StringIO(); w = lambda *a: print(*a, file=r)  # noqa: E731
    rep = io.StringIO(); summ = []; tot = collections.Counter(); allcm = []
    table = []
    firsts = {}      # message name -> (pcap, frame no) for tshark -V
    for t in S["tests"]:
        name = t["name"]; pcap = os.path.join(OUT, name + ".pcap")
        if not os.path.exists(pcap):
            continue
        recs = cm_decode.decode_file(pcap, MACS)
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            print(name + ".pcap: CM messages (cm_decode.py)")
            t0 = recs[0]["ts"] if recs else 0
            for x in recs:
                s = cm_decode.line(x, t0) if "mgmt_class" in x else None
                if s:
                    print("  " + s)
            print()
            print(name + ".pcap: all RoCEv2 frames (icrc_check.py --dump)")
            res = icrc_check.check(pcap, dump=True)
            print()
            print(name + ".pcap: full cm_decode.py field decode of every CM frame (JSON)")
            print(json.dumps([x for x in recs if "mgmt_class" in x], indent=1))
        open(os.path.join(DEC, name + ".txt"), "w").write(buf.getvalue())
        rows, malformed = tshark_rows(pcap)
        ncheck, mism = cross_check(recs, rows)
        cm = [x for x in recs if x.get("mgmt_class") == 7]
        allcm += cm
        for x in cm:
            firsts.setdefault((x["attr_name"], x["ipver"]), (name, x["no"]))
        other_roce = collections.Counter(x["opname"] for x in recs if "opname" in x and x.get("mgmt_class") is None)
        non_roce = sum(1 for x in recs if x.get("non_roce"))
        seq = " ".join("%s:%s" % (x["dir"], x["attr_name"]) for x in cm)
        dq = collections.defaultdict(set); sp = collections.defaultdict(set)
        for x in recs:
            if "opname" in x and x.get("mgmt_class") is None:
                dq[x["dir"]].add("0x%06x" % x["dqpn"]); sp[x["dir"]].add(x["sport"])
        ca0, ca1 = counters(t.get("counters_A_before")), counters(t.get("counters_A_after"))
        cb0, cb1 = counters(t.get("counters_B_before")), counters(t.get("counters_B_after"))
        dA = {k: ca1.get(k, 0) - ca0.get(k, 0) for k in ca1 if ca1.get(k, 0) != ca0.get(k, 0)}
        dB = {k: cb1.get(k, 0) - cb0.get(k, 0) for k in cb1 if cb1.get(k, 0) != cb0.get(k, 0)}
        dropped = 0; dpath = os.path.join(OUT, name + ".dropped.pcap")
        if os.path.exists(dpath):
            dres = icrc_check.check(dpath); dropped = dres["roce"]
            drecs = cm_decode.decode_file(dpath, MACS)
            tot["icrc_ok"] += dres["icrc_ok"]; tot["roce"] += dres["roce"]
        ipv = sorted({x["ipver"] for x in recs if "ipver" in x})
        tot["frames"] += res["frames"]; tot["roce"] += res["roce"]; tot["icrc_ok"] += res["icrc_ok"]
        ok = (t.get("client_rc") == 0 and (t.get("server_rc") == 0 or t.get("server_cmd_B") is None))
        table.append((name, t.get("client_rc"), t.get("server_rc"), t.get("expect"), res["frames"], len(cm),
                      " ".join(x["attr_name"] for x in cm)))
        w("=" * 110)
        w(f"{name}.pcap   frames {res['frames']}  (RoCEv2 {res['roce']}: CM MADs on QP1 {len(cm)}, other RoCEv2 "
          f"{res['roce'] - len(cm)}; non-RoCE {non_roce})")
        w(f"  what: {t.get('note', '')}")
        if t.get("server_cmd_B"):
            w(f"  guest B (server, {B['ip4']}):  {t['server_cmd_B']}")
        else:
            w(f"  guest B: no server started (nothing listens on the target port)")
        w(f"  guest A (client, {A['ip4']}):  {t['client_cmd_A']}")
        if t.get("listen_ids_B"):
            w(f"  B listening cm_id before the client started (rdma res show cm_id): {t['listen_ids_B'].strip()}")
        if t.get("relay_fault"):
            f = t["relay_fault"]
            what = {"drop": "dropped", "dup": "duplicated"}[f["action"]]
            w(f"  relay fault injection: {what} the {f['nth']}. {f['direction']} frame with "
              f"{'CM attribute ID' if f['kind'] == 'cm' else 'BTH opcode'} {f['value']}"
              + (f" (second copy {f['dup_delay_s'] * 1000:g} ms after the first; both copies are in the pcap)" if f["action"] == "dup" else
                 f" ({f.get('dropped')} frame -> {name}.dropped.pcap, not in {name}.pcap)"))
        if t.get("attempt", 1) > 1:
            w(f"  attempt {t['attempt']} (earlier attempt(s) did not show {t.get('want')}; they are only in session_all.pcap)")
        fam = "IPv6 link-local GIDs (index 0)" if ipv == [6] else "IPv4-mapped GIDs (index 1)"
        w(f"  RoCEv2 over IPv{'/'.join(map(str, ipv)) or '-'}: {fam}")
        exp_s = "" if t.get("expect", "ok") == "ok" else "  (failure expected: this test provokes an error)"
        w(f"  tool exit status: client {t.get('client_rc')}, server {t.get('server_rc') if t.get('server_cmd_B') else '- (none)'}{exp_s}")
        for who, fn in (("A", f"{name}.client_A.txt"), ("B", f"{name}.server_B.txt")):
            for l in tool_lines(os.path.join(OUT, "tool_output", fn)):
                w(f"  {who} says: {l}")
        w(f"  CM message sequence: {seq}")
        w("  CM frames (frame#, time from first frame, direction, BTH opcode, dest QP, DETH Q_Key/src QP | MAD class,")
        w("  method, attribute | TID | communication IDs | selected CM fields | ICRC):")
        for x in cm:
            w("    " + cm_decode.line(x, t0))
        if dropped:
            w(f"  dropped by the relay ({name}.dropped.pcap):")
            for x in drecs:
                if "mgmt_class" in x:
                    w("    " + cm_decode.line(x, x["ts"]).replace("  0.0000s ", " "))
        if other_roce:
            w("  other RoCEv2 frames: " + ", ".join(f"{v} {k}" for k, v in sorted(other_roce.items())))
            w(f"    data QP: A->B BTH DestQP {','.join(sorted(dq['A->B'])) or '-'} UDP sport {','.join(map(str, sorted(sp['A->B']))) or '-'}; "
              f"B->A BTH DestQP {','.join(sorted(dq['B->A'])) or '-'} UDP sport {','.join(map(str, sorted(sp['B->A']))) or '-'}")
        w(f"  rxe hw_counters delta: A {dA}")
        w(f"                         B {dB}")
        w(f"  ICRC: {res['icrc_ok']}/{res['roce']} match (icrc_check.py)"
          + (f"; dropped frame(s): {dropped} in {name}.dropped.pcap, ICRC {dres['icrc_ok']}/{dres['roce']}" if dropped else "")
          + f"; IPv4 header checksum bad: {res['ipv4_csum_bad']}; UDP checksum: {dict(res['udp_csum'])}")
        w(f"  tshark cross-check of {ncheck} CM frames (BTH opcode/dest QP, DETH, MAD class/method/attr/TID, comm IDs): "
          + ("all fields agree" if not mism else f"{len(mism)} MISMATCHES: " + "; ".join(mism[:5]))
          + f"; tshark malformed frames: {malformed}")
        w(f"  per-frame decode: decode/{name}.txt")
        rep.write(f"{name + '.pcap':36s} frames {res['frames']:4d} RoCEv2 {res['roce']:4d} ICRC ok {res['icrc_ok']:4d} "
                  f"bad {res['icrc_bad']}\n")
        if dropped:
            rep.write(f"{name + '.dropped.pcap':36s} frames {dropped:4d} RoCEv2 {dropped:4d} ICRC ok {dres['icrc_ok']:4d} "
                      f"bad {dres['icrc_bad']}\n")
        summ.append(dict(pcap=name + ".pcap", frames=res["frames"], roce=res["roce"], icrc_ok=res["icrc_ok"],
                         icrc_bad=res["icrc_bad"], server_cmd_B=t.get("server_cmd_B"), client_cmd_A=t["client_cmd_A"],
                         client_rc=t.get("client_rc"), server_rc=t.get("server_rc"), expect=t.get("expect"),
                         success=ok, relay_fault=t.get("relay_fault"), dropped=dropped,
                         cm_messages=[dict(frame=x["no"], dir=x["dir"], attr=x["attr_name"], attr_id="0x%04x" % x["attr_id"],
                                           tid=x["tid"], local_comm_id=x.get("local_comm_id"),
                                           remote_comm_id=x.get("remote_comm_id"), fields=x.get("cm")) for x in cm],
                         other_roce=dict(other_roce), tshark_mismatches=mism))
    sres = icrc_check.check(os.path.join(OUT, "session_all.pcap"))
    rep.write(f"{'session_all.pcap':36s} frames {sres['frames']:4d} RoCEv2 {sres['roce']:4d} ICRC ok {sres['icrc_ok']:4d} "
              f"bad {sres['icrc_bad']}\n")
    open(os.path.join(OUT, "icrc_report.txt"), "w").write(rep.getvalue())
    json.dump(summ, open(os.path.join(OUT, "summary.json"), "w"), indent=1)

    # tshark -V of one frame per CM message type
    tv = []
    for (msg, ipver), (name, no) in sorted(firsts.items(), key=lambda k: (k[0][1], k[1])):
        fn = f"tshark_V_{msg}{'_ipv6' if ipver == 6 else ''}.txt"
        if ipver == 6 and msg not in ("REQ", "SIDR_REQ"):
            continue
        txt = subprocess.run(["tshark", "-r", os.path.join(OUT, name + ".pcap"), "-V", "-Y", f"frame.number=={no}"],
                             capture_output=True, text=True, timeout=120).stdout
        rec = [x for x in cm_decode.decode_file(os.path.join(OUT, name + ".pcap"), MACS) if x["no"] == no][0]
        with open(os.path.join(DEC, fn), "w") as f:
            f.write(f"# tshark -V -r {name}.pcap -Y 'frame.number=={no}'   ({msg}, {rec['dir']}, IPv{ipver})\n")
            f.write(f"# {sh('tshark --version | head -1')}\n")
            if "Dissector Not Implemented" in txt:
                f.write("# NOTE: TShark 4.0 has no dissector for the body of this CM message (it prints 'Dissector Not "
                        "Implemented'); the cm_decode.py field decode below covers it.\n")
            f.write(txt)
            f.write("\n# cm_decode.py decode of the same frame:\n# " + cm_decode.line(rec) + "\n")
            f.write(json.dumps(rec, indent=1) + "\n")
        tv.append(f"{fn} ({name}.pcap frame {no})")

    # wire facts over all CM frames
    def vals(k):
        return sorted({str(x.get(k)) for x in allcm})
    sports = collections.defaultdict(set)
    for x in allcm:
        sports[x["dir"]].add(x["sport"])
    flen = sorted({(x["ipver"], x["frame_len"]) for x in allcm})
    kinds = collections.Counter(x["attr_name"] for x in allcm)

    ver = {p: sh(f"dpkg-query -W -f '${{Version}}' {p}") for p in
           ("linux-image-" + S["kernel"], "rdmacm-utils", "librdmacm1", "libibverbs1", "ibverbs-providers",
            "rdma-core", "iproute2", "busybox-static", "qemu-system-x86", "tshark")}
    qv = sh("qemu-system-x86_64 --version | head -1")
    tsv = sh("tshark --version | head -1")
    gidA = json.dumps(S.get("gid_index", {}).get("A")); gidB = json.dumps(S.get("gid_index", {}).get("B"))
    h = io.StringIO(); p = lambda *a: print(*a, file=h)  # noqa: E731
    p("Golden RoCEv2 captures of the Linux RDMA connection manager (IB CM MADs on QP1, rdma_cm private data)")
    p("=======================================================================================================")
    p(f"Kernel: Debian linux-image-{S['kernel']} {ver['linux-image-' + S['kernel']]} in both guests, modules as shipped:")
    p("  ib_core ib_uverbs ib_cm iw_cm rdma_cm (+configfs) rdma_ucm rdma_rxe (loaded in that order by /init);")
    p("  /dev/infiniband/rdma_cm (misc 10:124, created by devtmpfs when rdma_ucm loads) and /dev/infiniband/uverbs0 present.")
    p(f"Guest userland (copied from the host): rdmacm-utils {ver['rdmacm-utils']} (rping, ucmatose, udaddy, rdma_server,")
    p(f"  rdma_client), librdmacm1 {ver['librdmacm1']}, libibverbs1 {ver['libibverbs1']}, ibverbs-providers {ver['ibverbs-providers']}")
    p(f"  (librxe), iproute2 {ver['iproute2']} (ip, rdma), busybox-static {ver['busybox-static']} (initramfs, /init = serial agent).")
    p(f"  libgcc_s.so.1 is added explicitly: glibc dlopen()s it for pthread_exit/pthread_cancel (rping aborts without it).")
    p(f"Emulator: {qv}, TCG (no KVM on this host), q35, qboot, 1 vCPU, 768 MiB per guest.")
    p(f"Dissector: {tsv.rstrip('.')}; RoCEv2 on UDP 4791 is dissected without -d.")
    p("")
    p("Topology: two guests, each with one virtio-net NIC eth0 on its own '-netdev dgram' endpoint:")
    p(f"  guest A (client): eth0 MAC {A['mac']}  IPv4 {A['ip4']}/24  IPv6 {A['ip6']}  QEMU 127.0.0.1:{A['qemu']} <-> relay 127.0.0.1:{A['relay']}")
    p(f"  guest B (server): eth0 MAC {B['mac']}  IPv4 {B['ip4']}/24  IPv6 {B['ip6']}  QEMU 127.0.0.1:{B['qemu']} <-> relay 127.0.0.1:{B['relay']}")
    p("  rxe0 on eth0 in both guests; node GUID A 5054:00ff:fe00:000a, B 5054:00ff:fe00:0014 (REQ/REP 'Local CA GUID').")
    p(f"  rxe0 GID table: index 0 = fe80::5054:ff:fe00:a / fe80::5054:ff:fe00:14 (RoCE v2, link-local),")
    p(f"                  index 1 = ::ffff:192.0.2.10 / ::ffff:192.0.2.20 (RoCE v2, IPv4-mapped)  (found: A {gidA}, B {gidB}).")
    p("  rdma_cm picks the GID from the IP address: IPv4 tests -> RoCEv2/IPv4 (index 1), IPv6 tests (address")
    p(f"  {B['ip6']}%eth0) -> RoCEv2/IPv6 (index 0).")
    p("  The relay (thread in scripts/golden.py) forwards every frame A<->B and writes it (host time stamps, usec,")
    p("  LINKTYPE_ETHERNET, no FCS) to the pcap of the running test and to session_all.pcap (everything, incl. the")
    p("  setup phase (8 MLDv2 reports), repeated attempts and the relay-dropped frames). Static ARP/neighbour entries")
    p("  (nud permanent), IPv6 DAD and router solicitations off; no control traffic on the wire (guests are driven over")
    p(f"  their serial consoles). netdev MTU {S['netdev_mtu']} -> rxe0 active_mtu 4096 (REQ path MTU 4096).")
    p("  There is no out-of-band TCP exchange: all connection setup is rdma_cm/ib_cm on the wire. Before each client")
    p("  starts, /init polls 'rdma res show cm_id' on B until the server's cm_id is in state LISTEN, then waits 3 s more.")
    p("  B is always the server (passive side), A the client (active side).")
    p("")
    p("CM MAD wire facts (all %d CM frames of the per-test pcaps: %s):" % (
        len(allcm), ", ".join(f"{k} {v}" for k, v in sorted(kinds.items()))))
    p(f"  BTH opcode {vals('opname')} (0x64), DestQP {vals('dqpn')} (GSI), AckReq {vals('ackreq')}, P_Key {vals('pkey')},"
      f" SE {vals('se')}, PadCnt {vals('pad')};")
    v4 = [x for x in allcm if x["ipver"] == 4]; v6 = [x for x in allcm if x["ipver"] == 6]
    p(f"  DETH Q_Key {vals('qkey')}, source QP {vals('srcqp')}; UDP checksum {vals('udp_csum')};")
    p(f"  IPv4: TOS {sorted({x['tos'] for x in v4})}, TTL {sorted({x['ttl'] for x in v4})}, DF {sorted({x['df'] for x in v4})}; "
      f"IPv6: traffic class {sorted({x['tclass'] for x in v6})}, flow label {sorted({x['flow'] for x in v6})}, "
      f"hop limit {sorted({x['hlim'] for x in v6})};")
    p("  BTH PSN of QP1 = per-node counter, +1 per MAD sent (visible across the captures of one session);")
    p(f"  UDP source port of QP1 per direction: " + "; ".join(f"{d} {sorted(v)}" for d, v in sorted(sports.items()))
      + " (rxe derives it from the QP number, so it is constant);")
    p(f"  MAD: 256 bytes (24-byte common header + 232-byte CM message), BaseVersion 1, MgmtClass 0x07, ClassVersion 2,")
    p(f"  Method 0x03 Send for every CM message, Status 0, AttributeModifier 0; frame length (IP version, bytes): {flen}.")
    p("  TID = (MAD agent hi_tid = 2) << 32 | the sender's local communication ID (kernel cm_form_tid(); the ID is")
    q = [x for x in allcm if x["attr_name"] == "REQ"][0]
    p("  kept big-endian in the kernel and its raw value used, so the low 32 bits appear byte-swapped: e.g. rping REQ")
    p(f"  comm ID {q['local_comm_id']} -> TID {q['tid']}). REQ, SIDR_REQ and DREQ carry the sender's own TID; REP, RTU, MRA,")
    p("  REJ, DREP and SIDR_REP echo the TID of the exchange they belong to (so REQ/REP/RTU share one TID, and a DREQ")
    p("  from the active side has the same TID as its REQ while a DREQ from the passive side has a new one).")
    p("  Service ID = 0x0000000001PPpppp with PP = rdma_cm port space (0x06 RDMA_PS_TCP, 0x11 RDMA_PS_UDP), pppp = port.")
    p("  REQ and SIDR_REQ private data start with the rdma_cm header (struct cma_hdr: cma_version 0, ip_version<<4,")
    p("  source port, source IP, destination IP as 16-byte fields; IPv4 in the last 4 bytes); the tools send no")
    p("  consumer private data (REP/RTU/DREQ/DREP/REJ private data all zero).")
    p("  Wireshark shows the REQ source as 'LID: 65535' in its one-line summary (it takes the CM path's LID); the")
    p("  IP header of that frame carries the normal source address.")
    p("")
    p("ICRC check: scripts/icrc_check.py (from /work/shared/vectors/scripts, unchanged) recomputes CRC-32 over the")
    p("masked IP/UDP/BTH headers + payload and compares it with the little-endian trailer (see that script's header).")
    p(f"Result: {tot['icrc_ok']}/{tot['roce']} RoCEv2 frames in the per-test pcaps (incl. *.dropped.pcap) have a matching ICRC;")
    p(f"        session_all.pcap: {sres['icrc_ok']}/{sres['roce']}. See icrc_report.txt and icrc_check_output.txt")
    p("        (negative control --selftest at the end of icrc_report.txt).")
    p("CM decode: scripts/cm_decode.py (independent of tshark) decodes the MAD header and every CM attribute (REQ,")
    p("MRA, REJ, REP, RTU, DREQ, DREP, SIDR_REQ, SIDR_REP) and the cma_hdr; it is cross-checked field by field")
    p("against tshark (opcode, dest QP, Q_Key, src QP, class, method, attribute, TID, comm IDs) for every CM frame.")
    p("TShark 4.0 dissects REQ/REP/RTU/REJ/DREQ/DREP fully, but has no body dissector for MRA, SIDR_REQ and SIDR_REP")
    p("('Dissector Not Implemented'; header fields only). Over IPv6, tshark flags every RoCEv2 frame with the expert")
    p("error 'UDP: Illegal checksum value (0)' (rxe sends UDP checksum 0 also over IPv6, as RoCEv2 permits).")
    p("")
    p("Summary (client/server exit status; expect = ok: both must exit 0, fail: the test provokes an error):")
    p("  %-24s %6s %6s %6s %6s %4s  %s" % ("test", "client", "server", "expect", "frames", "CM", "CM messages in order"))
    for name, crc, src, exp, fr, ncm, seq in table:
        p("  %-24s %6s %6s %6s %6d %4d  %s" % (name, crc, "-" if src is None else src, exp, fr, ncm, seq))
    p("")
    p("Files: <test>.pcap (one per test), <test>.dropped.pcap (frames the relay dropped), session_all.pcap,")
    p("decode/<test>.txt (CM one-line decode + icrc_check.py dump of every RoCEv2 frame + full CM field decode as JSON),")
    p("decode/tshark_V_<MSG>.txt (tshark -V of one frame per CM message type, with cm_decode.py's decode appended):")
    for x in tv:
        p("    " + x)
    p("tool_output/<test>.{client_A,server_B}.txt (tool stdout/stderr + exit status), tool_output/setup_{A,B}.txt")
    p("(addresses, GIDs, modules, /dev/infiniband), logs/console_{A,B}.log (both serial consoles with every command),")
    p("logs/run_summary.json (commands, exit codes, listening cm_ids, rxe hw_counters before/after), logs/golden_run.txt,")
    p("summary.json (machine-readable per-pcap summary incl. every CM message), icrc_report.txt, icrc_check_output.txt,")
    p("scripts/: run.sh (reproduce everything), golden.py (VM driver + recording relay with CM-aware drop/duplicate),")
    p("build-initramfs.sh + init (guest image; /init = serial command agent), cm_decode.py, icrc_check.py, make_readme.py,")
    p("relay.py (standalone relay for manual runs).")
    p("")
    p("Reproduce (Debian 12, root):  apt-get install qemu-system-x86 linux-image-amd64 busybox-static ibverbs-utils \\")
    p("   ibverbs-providers rdma-core rdmacm-utils kmod cpio iproute2 tshark;  scripts/run.sh")
    p("   (~4 min under TCG; comm IDs, TIDs, QPNs, PSNs and UDP source ports differ from run to run; the fault_dup_*")
    p("   tests depend on guest scheduling, fault_dup_rep_mra is repeated until an MRA is seen)")
    p("")
    p("Per-capture details")
    open(os.path.join(OUT, "README.txt"), "w").write(h.getvalue() + r.getvalue())
    print(h.getvalue().split("Summary")[1].split("Files:")[0])
    print(rep.getvalue())


if __name__ == "__main__":
    main()
