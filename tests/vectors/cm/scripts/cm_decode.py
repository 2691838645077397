#!/usr/bin/env python3
"""Independent decoder for IB CM MADs carried over RoCEv2 (UD SEND ONLY to QP1, DETH Q_Key
0x80010000, source QP 1), as sent by the Linux ib_cm/rdma_cm.  Uses icrc_check.parse() for the
Ethernet/IP/UDP/BTH/DETH layers (and the ICRC verdict), then decodes the 24-byte MAD common header
and the CM attribute (IBTA Vol.1 ch. 12.6 message layouts) plus the rdma_cm private-data header
(struct cma_hdr: version, ip_version<<4, src port, src addr[16], dst addr[16]).

Usage: cm_decode.py [--json] PCAP...    one line per CM frame (and a summary of other RoCEv2 frames)
"""
import json, socket, struct, sys, os

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import icrc_check  # noqa: E402

ATTR = {0x0010: "REQ", 0x0011: "MRA", 0x0012: "REJ", 0x0013: "REP", 0x0014: "RTU", 0x0015: "DREQ",
        0x0016: "DREP", 0x0017: "SIDR_REQ", 0x0018: "SIDR_REP", 0x0019: "LAP", 0x001A: "APR",
        0x0001: "ClassPortInfo"}
METHOD = {0x01: "Get", 0x02: "Set", 0x03: "Send", 0x81: "GetResp", 0x06: "Trap", 0x07: "Report"}
CLASS = {0x01: "SubnMgt(LID)", 0x81: "SubnMgt(DR)", 0x03: "SubnAdm", 0x04: "PerfMgt", 0x07: "CM"}
REJ_REASON = {1: "no QP", 2: "no EEC", 3: "no resources", 4: "timeout", 5: "unsupported request",
              6: "invalid comm ID", 7: "invalid comm instance", 8: "invalid service ID",
              9: "invalid transport service type", 10: "stale conn", 11: "RDC not exist", 12: "invalid GID",
              13: "invalid LID", 14: "invalid SL", 15: "invalid traffic class", 16: "invalid hop limit",
              17: "invalid packet rate", 18: "invalid alt GID", 19: "invalid alt LID", 20: "invalid alt SL",
              21: "invalid alt traffic class", 22: "invalid alt hop limit", 23: "invalid alt packet rate",
              24: "port CM redirect", 25: "port redirect", 26: "invalid MTU", 27: "insufficient resp resources",
              28: "consumer defined", 29: "invalid RNR retry", 30: "duplicate local comm ID",
              31: "invalid class version", 32: "invalid flow label", 33: "invalid alt flow label"}
SIDR_STATUS = {0: "valid", 1: "service ID not supported", 2: "rejected by service", 3: "no QP",
               4: "redirect", 5: "unsupported class version"}
MSG_TYPE = {0: "REQ", 1: "REP", 2: "other"}


def u(b, o, n):
    return int.from_bytes(b[o:o + n], "big")


def gid_str(b):
    a = socket.inet_ntop(socket.AF_INET6, bytes(b))
    return a


def cma_hdr(pd):
    """rdma_cm private data header (drivers/infiniband/core/cma_priv.h struct cma_hdr)."""
    ver, ipv, port = pd[0], pd[1] >> 4, u(pd, 2, 2)
    if ipv == 4:
        src, dst = socket.inet_ntoa(pd[16:20]), socket.inet_ntoa(pd[32:36])
    elif ipv == 6:
        src, dst = gid_str(pd[4:20]), gid_str(pd[20:36])
    else:
        return {"cma_version": ver, "ip_version": ipv}
    rest = pd[36:]
    return {"cma_version": ver, "ip_version": ipv, "src_port": port, "src": src, "dst": dst,
            "consumer_pd_nonzero": sum(1 for x in rest if x)}


def service(sid):
    ps = (sid >> 16) & 0xFFFF
    name = {0x0106: "RDMA_PS_TCP", 0x0111: "RDMA_PS_UDP", 0x0002: "RDMA_PS_IPOIB", 0x013F: "RDMA_PS_IB"}.get(ps)
    if sid >> 32 == 0 and name:
        return "0x%016x (%s port %d)" % (sid, name, sid & 0xFFFF)
    return "0x%016x" % sid


def decode_cm(attr, d):
    """d = 232-byte CM message (MAD data).  Returns (local_comm_id, remote_comm_id, extras dict)."""
    x = {}
    lid = rid = None
    if attr == 0x0010:                                   # REQ
        lid = u(d, 0, 4)
        x["service_id"] = service(u(d, 8, 8))
        x["local_ca_guid"] = "0x%016x" % u(d, 16, 8)
        x["local_qkey"] = "0x%08x" % u(d, 28, 4)
        x["local_qpn"] = "0x%06x" % u(d, 32, 3)
        x["responder_resources"] = d[35]
        x["initiator_depth"] = d[39]
        x["remote_cm_resp_timeout"] = d[43] >> 3
        x["transport"] = {0: "RC", 1: "UC", 2: "RD", 3: "XRC?"}[(d[43] >> 1) & 3]
        x["starting_psn"] = "0x%06x" % u(d, 44, 3)
        x["local_cm_resp_timeout"] = d[47] >> 3
        x["retry_count"] = d[47] & 7
        x["pkey"] = "0x%04x" % u(d, 48, 2)
        x["path_mtu"] = {1: 256, 2: 512, 3: 1024, 4: 2048, 5: 4096}.get(d[50] >> 4, d[50] >> 4)
        x["rnr_retry"] = d[50] & 7
        x["max_cm_retries"] = d[51] >> 4
        x["srq"] = (d[51] >> 3) & 1
        x["prim_lids"] = "0x%04x/0x%04x" % (u(d, 52, 2), u(d, 54, 2))
        x["prim_local_gid"] = gid_str(d[56:72])
        x["prim_remote_gid"] = gid_str(d[72:88])
        x["prim_flow_label"] = "0x%05x" % (u(d, 88, 4) >> 12)
        x["prim_rate"] = d[91] & 0x3F
        x["prim_tclass"] = d[92]
        x["prim_hop_limit"] = d[93]
        x["prim_sl"] = d[94] >> 4
        x["prim_local_ack_timeout"] = d[95] >> 3
        x["cma"] = cma_hdr(d[140:232])
    elif attr == 0x0013:                                 # REP
        lid, rid = u(d, 0, 4), u(d, 4, 4)
        x["local_qkey"] = "0x%08x" % u(d, 8, 4)
        x["local_qpn"] = "0x%06x" % u(d, 12, 3)
        x["starting_psn"] = "0x%06x" % u(d, 20, 3)
        x["responder_resources"] = d[24]
        x["initiator_depth"] = d[25]
        x["target_ack_delay"] = d[26] >> 3
        x["failover"] = (d[26] >> 1) & 3
        x["e2e_flow"] = d[26] & 1
        x["rnr_retry"] = d[27] >> 5
        x["srq"] = (d[27] >> 4) & 1
        x["local_ca_guid"] = "0x%016x" % u(d, 28, 8)
        x["private_data_nonzero"] = sum(1 for b in d[36:232] if b)
    elif attr in (0x0014, 0x0016):                       # RTU, DREP
        lid, rid = u(d, 0, 4), u(d, 4, 4)
        x["private_data_nonzero"] = sum(1 for b in d[8:232] if b)
    elif attr == 0x0015:                                 # DREQ
        lid, rid = u(d, 0, 4), u(d, 4, 4)
        x["remote_qpn"] = "0x%06x" % u(d, 8, 3)
        x["private_data_nonzero"] = sum(1 for b in d[12:232] if b)
    elif attr == 0x0012:                                 # REJ
        lid, rid = u(d, 0, 4), u(d, 4, 4)
        x["msg_rejected"] = MSG_TYPE.get(d[8] >> 6, d[8] >> 6)
        x["rej_info_len"] = d[9] >> 1
        r = u(d, 10, 2)
        x["reason"] = "%d (%s)" % (r, REJ_REASON.get(r, "?"))
        x["ari"] = d[12:12 + x["rej_info_len"]].hex() if x["rej_info_len"] else ""
        x["private_data_nonzero"] = sum(1 for b in d[84:232] if b)
    elif attr == 0x0011:                                 # MRA
        lid, rid = u(d, 0, 4), u(d, 4, 4)
        x["msg_mraed"] = MSG_TYPE.get(d[8] >> 6, d[8] >> 6)
        x["service_timeout"] = d[9] >> 3
    elif attr == 0x0017:                                 # SIDR_REQ
        x["request_id"] = "0x%08x" % u(d, 0, 4)
        x["pkey"] = "0x%04x" % u(d, 4, 2)
        x["service_id"] = service(u(d, 8, 8))
        x["cma"] = cma_hdr(d[16:232])
    elif attr == 0x0018:                                 # SIDR_REP
        x["request_id"] = "0x%08x" % u(d, 0, 4)
        s = d[4]
        x["status"] = "%d (%s)" % (s, SIDR_STATUS.get(s, "?"))
        x["add_info_len"] = d[5]
        x["qpn"] = "0x%06x" % u(d, 8, 3)
        x["service_id"] = service(u(d, 12, 8))
        x["qkey"] = "0x%08x" % u(d, 20, 4)
        x["private_data_nonzero"] = sum(1 for b in d[96:232] if b)
    return lid, rid, x


def decode_frame(no, ts, frame, macs):
    r = icrc_check.parse(frame)
    if not r:
        return None
    direction = macs.get((r["smac"], r["dmac"]), "%s->%s" % (r["smac"], r["dmac"]))
    rec = {"no": no, "ts": ts, "dir": direction, "ipver": r["ipver"], "src": r["src"], "dst": r["dst"],
           "sport": r["sport"], "opcode": r["opcode"], "opname": r["opname"], "dqpn": r["dqpn"],
           "psn": r["psn"], "ackreq": r["ackreq"], "pkey": "0x%04x" % r["pkey"], "se": r["se"], "pad": r["pad"], "icrc_ok": r["icrc_ok"], "frame_len": len(frame)}
    for k in ("tos", "ttl", "df", "tclass", "flow", "hlim", "udp_csum"):
        if k in r:
            rec[k] = r[k]
    if "DETH" in r["ext"]:
        rec["qkey"] = r["ext"]["DETH"]["qkey"]; rec["srcqp"] = r["ext"]["DETH"]["srcqp"]
    if r["dqpn"] != 1 or r["opcode"] != 0x64:
        return rec
    # locate the MAD: after BTH (12) + DETH (8)
    l2 = 14; ihl = (frame[l2] & 0xF) * 4 if r["ipver"] == 4 else 40
    mad = frame[l2 + ihl + 8 + 12 + 8:-4]
    rec["mad_len"] = len(mad)
    rec["base_version"] = mad[0]; rec["mgmt_class"] = mad[1]; rec["class_version"] = mad[2]
    rec["method"] = mad[3]; rec["status"] = u(mad, 4, 2); rec["class_specific"] = u(mad, 6, 2)
    rec["tid"] = "0x%016x" % u(mad, 8, 8); rec["attr_id"] = u(mad, 16, 2); rec["attr_mod"] = u(mad, 20, 4)
    rec["attr_name"] = ATTR.get(rec["attr_id"], "0x%04x" % rec["attr_id"]) if mad[1] == 0x07 else "-"
    if mad[1] == 0x07:
        lid, rid, x = decode_cm(rec["attr_id"], mad[24:256])
        rec["local_comm_id"] = None if lid is None else "0x%08x" % lid
        rec["remote_comm_id"] = None if rid is None else "0x%08x" % rid
        rec["cm"] = x
    return rec


def line(rec, t0=None):
    t = "" if t0 is None else "%8.4fs " % (rec["ts"] - t0)
    if "mgmt_class" not in rec:
        return None
    ids = ("local_comm_id %s remote_comm_id %s" % (rec.get("local_comm_id") or "-", rec.get("remote_comm_id") or "-")
           if rec["attr_name"] not in ("SIDR_REQ", "SIDR_REP") else "request_id %s" % rec["cm"]["request_id"])
    x = rec.get("cm", {})
    extra = []
    for k in ("service_id", "local_qpn", "starting_psn", "remote_qpn", "qpn", "qkey", "status", "reason",
              "msg_rejected", "msg_mraed", "service_timeout", "path_mtu"):
        if k in x:
            extra.append("%s=%s" % (k, x[k]))
    if "cma" in x and "src" in x["cma"]:
        c = x["cma"]
        extra.append("cma_hdr v%d ip%d %s:%d -> %s" % (c["cma_version"], c["ip_version"], c["src"], c["src_port"], c["dst"]))
    return ("#%-3d %s%s %s BTH 0x%02x %s dqp 0x%06x DETH qkey %s srcqp %s | MAD class 0x%02x method 0x%02x(%s) "
            "attr 0x%04x %-8s TID %s | %s | %s | ICRC %s" % (
                rec["no"], t, rec["dir"], "IPv%d" % rec["ipver"], rec["opcode"], rec["opname"], rec["dqpn"],
                rec.get("qkey"), rec.get("srcqp"), rec["mgmt_class"], rec["method"],
                METHOD.get(rec["method"], "?"), rec["attr_id"], rec["attr_name"], rec["tid"], ids,
                " ".join(extra), "ok" if rec["icrc_ok"] else "BAD"))


def decode_file(path, macs):
    out = []
    for i, (ts, f) in enumerate(icrc_check.read_pcap(path), 1):
        r = decode_frame(i, ts, f, macs)
        if r is None:
            r = {"no": i, "ts": ts, "non_roce": True, "frame_len": len(f)}
        out.append(r)
    return out


def main():
    macs = {("52:54:00:00:00:0a", "52:54:00:00:00:14"): "A->B", ("52:54:00:00:00:14", "52:54:00:00:00:0a"): "B->A"}
    js = "--json" in sys.argv
    for p in [a for a in sys.argv[1:] if not a.startswith("--")]:
        recs = decode_file(p, macs)
        if js:
            print(json.dumps(recs, indent=1)); continue
        print(p)
        t0 = recs[0]["ts"] if recs else 0
        for r in recs:
            s = line(r, t0) if "mgmt_class" in r else None
            if s:
                print("  " + s)


if __name__ == "__main__":
    main()
