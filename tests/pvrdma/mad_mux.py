#!/usr/bin/env python3
"""The MAD multiplexer QEMU's pvrdma needs, standing in for QEMU's
contrib/rdmacm-mux on a unix socket.

QEMU 7.2's pvrdma will not start without `mad-chardev=`. Its backend
(hw/rdma/rdma_backend.c) sends fixed 360-byte records (RdmaCmMuxMsg on
x86-64): msg_type u32 at 0 (0 request, 1 response), op u32 at 4 (0 register
a GID, 1 unregister it, 2 a MAD), the GID at 8, err_code u32 at 24,
umad_len i32 at 32, then the umad. Each request is answered with the same
record as a response with err_code 0, so the guest's CREATE_BIND and
DESTROY_BIND of a GID succeed. MADs (QP1, RDMA CM) are answered and
dropped: nothing in the pvrdma VM test uses QP1.

Usage: mad_mux.py SOCKET_PATH. Logs one line per record and the counts
per operation when QEMU disconnects.
"""
import os
import socket
import struct
import sys

RECORD = 360
OPS = {0: "register-gid", 1: "unregister-gid", 2: "mad"}


def serve(conn):
    counts = {}
    pending = b""
    while True:
        data = conn.recv(65536)
        if not data:
            break
        pending += data
        while len(pending) >= RECORD:
            rec, pending = bytearray(pending[:RECORD]), pending[RECORD:]
            kind, op = struct.unpack_from("<II", rec, 0)
            name = OPS.get(op, f"op{op}")
            counts[name] = counts.get(name, 0) + 1
            print(f"mad-mux: {name} gid={rec[8:24].hex()} type={kind}", flush=True)
            if kind != 0:
                continue
            struct.pack_into("<I", rec, 0, 1)
            struct.pack_into("<I", rec, 24, 0)
            conn.sendall(bytes(rec))
    print(f"mad-mux: QEMU disconnected; records {counts}", flush=True)


def main():
    path = sys.argv[1]
    if os.path.exists(path):
        os.unlink(path)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(1)
    print(f"mad-mux: listening on {path}", flush=True)
    while True:
        conn, _ = srv.accept()
        with conn:
            serve(conn)


if __name__ == "__main__":
    main()
