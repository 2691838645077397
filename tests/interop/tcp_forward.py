#!/usr/bin/env python3
"""Forwards TCP from LISTEN_ADDR:LISTEN_PORT to 127.0.0.1:TO_PORT, one
thread per direction of each connection, until killed.

Usage: tcp_forward.py LISTEN_ADDR LISTEN_PORT TO_PORT

The interop test's qperf needs its control connection to rxe's address
(192.0.2.2, on the loopback of the test's network namespace) to reach
the guest, which QEMU forwards from 127.0.0.1:TO_PORT.
"""
import socket
import sys
import threading


def pump(src, dst):
    try:
        while True:
            b = src.recv(65536)
            if not b:
                break
            dst.sendall(b)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def main():
    addr, port, to = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    srv = socket.create_server((addr, port))
    print("listening", flush=True)
    while True:
        c, _ = srv.accept()
        u = socket.create_connection(("127.0.0.1", to))
        for a, b in ((c, u), (u, c)):
            threading.Thread(target=pump, args=(a, b), daemon=True).start()


if __name__ == "__main__":
    main()
