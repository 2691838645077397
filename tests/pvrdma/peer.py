#!/usr/bin/env python3
"""The PVRDMA VM test's host peer: unmodified ibv_rc_pingpong,
ibv_ud_pingpong and ibv_srq_pingpong servers over rnic's drop-in
libibverbs, one after another,
each an rnic NIC on the same UDP wire to QEMU's backend NIC.

The wire's socket is bound here once, on a port the kernel picks, and
handed to every server as an inherited descriptor (the drop-in's
`wire=udp-fd:FD=REMOTE`), so no port is ever closed and bound again. Its
port goes to PORT_FILE for run.sh to give QEMU.

Usage: peer.py LIBDIR QEMU_WIRE PORT_FILE TIMEOUT ROUND...
  TIMEOUT    seconds a round may take (a server whose client failed
             would wait for ever, holding up the next rounds)
  LIBDIR     where the drop-in libibverbs.so.1 is
  QEMU_WIRE  QEMU's backend NIC's UDP address (127.0.0.1:PORT)
  PORT_FILE  where this peer writes its own UDP port
  ROUND      PROGRAM:TCP_PORT:SIZE:ITERS[:e], PROGRAM rc, ud or srq (four
             QPs on an SRQ); e: on CQ events
Prints one "ok   host ..." or "FAIL host ..." line per round and exits 0
when every round passed.
"""

import os
import socket
import subprocess
import sys


def main():
    libdir, qemu_wire, port_file, timeout = sys.argv[1:5]
    rounds = sys.argv[5:]
    wire = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    wire.bind(("127.0.0.1", 0))
    with open(port_file + ".tmp", "w") as f:
        f.write(f"{wire.getsockname()[1]}\n")
    os.rename(port_file + ".tmp", port_file)
    fd = wire.fileno()
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = libdir
    env["RNIC_DEVICES"] = (
        f"name=rnic0,mac=02:00:00:00:00:02,ipv4=192.0.2.2,wire=udp-fd:{fd}={qemu_wire}"
    )
    failed = 0
    for spec in rounds:
        prog, tcp, size, iters, *mode = spec.split(":")
        args = [
            f"ibv_{prog}_pingpong", "-d", "rnic0", "-g", "1", "-c",
            "-r", "32", "-n", iters, "-s", size, "-p", tcp,
        ]
        if prog == "srq":
            # Four QPs on one SRQ (16 by default).
            args += ["-q", "4"]
        if mode == ["e"]:
            args.append("-e")
        what = f"{' '.join(args)}"
        try:
            run = subprocess.run(
                args, env=env, pass_fds=(fd,), capture_output=True, text=True,
                timeout=float(timeout),
            )
            out, rc = run.stdout + run.stderr, run.returncode
        except subprocess.TimeoutExpired as e:
            out, rc = f"{e.stdout or ''}{e.stderr or ''}timed out", -1
        for line in out.splitlines():
            print(f"  peer: {line}")
        if rc == 0 and f"{iters} iters in" in out:
            print(f"ok   host: {what}")
        else:
            print(f"FAIL host: {what} (exit {rc})")
            failed += 1
        sys.stdout.flush()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
