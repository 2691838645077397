#!/usr/bin/env bash
# Prepares a machine to build and test rnic: the Rust toolchain with the
# rustfmt and clippy components, the Debian packages the VFIO VM test
# (tests/vm/run.sh) and the rxe interop test (tests/interop/run.sh) boot
# from: QEMU, a kernel with its modules, busybox, cpio, kmod (and xz-utils
# or zstd if the modules are compressed); what the interop test puts in its
# guest and builds, and the PVRDMA VM test (tests/pvrdma/run.sh, which
# needs QEMU 7.2 to 9.0 and python3): ibverbs-utils, ibverbs-providers, perftest,
# libibverbs-dev (headers, static libraries), iproute2, gcc; tshark for
# the capture test; and Chromium, in which rnic-trace's test renders.
# Idempotent, and quick when everything is already there (it only asks
# rustup or apt when something is missing).
set -euo pipefail
# depmod (kmod) lives in /usr/sbin, which a non-root user's PATH on Debian
# lacks.
export PATH=$PATH:/usr/sbin:/sbin

if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
fi

if ! command -v cargo >/dev/null 2>&1; then
    echo "setup: cargo not found. Install a Rust toolchain (1.81 or newer) with rustup first:" >&2
    echo "setup:   https://rustup.rs" >&2
    exit 1
fi

missing=()
cargo fmt --version >/dev/null 2>&1 || missing+=(rustfmt)
cargo clippy --version >/dev/null 2>&1 || missing+=(clippy)

if [ ${#missing[@]} -gt 0 ]; then
    if ! command -v rustup >/dev/null 2>&1; then
        echo "setup: missing ${missing[*]} and no rustup to install them with" >&2
        exit 1
    fi
    echo "setup: installing ${missing[*]}"
    rustup component add "${missing[@]}"
fi

# The VM test's packages: apt is asked only when one is missing.
vm_missing=()
command -v qemu-system-x86_64 >/dev/null 2>&1 || vm_missing+=(qemu-system-x86)
[ -r /usr/share/qemu/qboot.rom ] || vm_missing+=(qemu-system-data)
vm_kernel=
for k in /boot/vmlinuz-*; do
    [ -d "/lib/modules/${k#/boot/vmlinuz-}/kernel/drivers/vfio/pci" ] && vm_kernel=$k
done
[ -n "$vm_kernel" ] || vm_missing+=(linux-image-amd64)
if [ ! -x /bin/busybox ] || ldd /bin/busybox 2>/dev/null | grep -q '=>'; then
    vm_missing+=(busybox-static)
fi
command -v cpio >/dev/null 2>&1 || vm_missing+=(cpio)
command -v depmod >/dev/null 2>&1 || vm_missing+=(kmod)
# The capture test (tests/capture.rs) dissects the model's frames with
# tshark.
command -v tshark >/dev/null 2>&1 || vm_missing+=(tshark)
# The system-call count test (perf/tests/syscalls.rs) traces with strace.
command -v strace >/dev/null 2>&1 || vm_missing+=(strace)
# The rxe interop test (tests/interop/run.sh).
[ -x /usr/bin/ibv_rc_pingpong ] || vm_missing+=(ibverbs-utils)
[ -e /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so ] || vm_missing+=(ibverbs-providers)
[ -x /usr/bin/ib_write_bw ] || vm_missing+=(perftest)
[ -e /usr/include/infiniband/verbs.h ] && [ -e /usr/lib/x86_64-linux-gnu/libibverbs.a ] ||
    vm_missing+=(libibverbs-dev)
[ -x /usr/bin/rdma ] && command -v ss >/dev/null 2>&1 || vm_missing+=(iproute2)
command -v gcc >/dev/null 2>&1 || vm_missing+=(gcc)
# The PVRDMA VM test (tests/pvrdma/run.sh) serves QEMU's MAD chardev with
# a Python stand-in, and needs a QEMU that still has pvrdma (7.2 to 9.0:
# Debian 12's qemu-system-x86 is 7.2; QEMU 9.1 removed the device).
command -v python3 >/dev/null 2>&1 || vm_missing+=(python3)
# UCX and Open MPI (tests/ucx/run.sh, tests/mpi/run.sh).
command -v ucx_perftest >/dev/null 2>&1 || vm_missing+=(ucx-utils)
command -v mpirun >/dev/null 2>&1 || vm_missing+=(openmpi-bin)
command -v mpicc >/dev/null 2>&1 || vm_missing+=(libopenmpi-dev)
# RDMA CM: rdma_cma.h for the drop-in librdmacm's layout checks, and the
# programs that run over it (rping, ucmatose, udaddy, rdma_server/client,
# qperf).
[ -r /usr/include/rdma/rdma_cma.h ] || vm_missing+=(librdmacm-dev)
[ -x /usr/bin/rping ] || vm_missing+=(rdmacm-utils)
command -v qperf >/dev/null 2>&1 || vm_missing+=(qperf)
# rdma-core's own test suite (tests/rdma-core/run.sh) runs on Debian's
# pyverbs, which uses the system Python.
/usr/bin/python3 -c 'import pyverbs' >/dev/null 2>&1 || vm_missing+=(python3-pyverbs)
# rnic-trace's test renders its HTML in headless Chromium.
[ -x /usr/bin/chromium ] || vm_missing+=(chromium)
# Compressed modules (Debian 13 ships .ko.xz) are unpacked for the VM.
if [ -n "$vm_kernel" ]; then
    mods=/lib/modules/${vm_kernel#/boot/vmlinuz-}/kernel/drivers/vfio
    if [ -n "$(find "$mods" -name '*.ko.xz' | head -1)" ]; then
        command -v xz >/dev/null 2>&1 || vm_missing+=(xz-utils)
    fi
    if [ -n "$(find "$mods" -name '*.ko.zst' | head -1)" ]; then
        command -v zstd >/dev/null 2>&1 || vm_missing+=(zstd)
    fi
fi

if [ ${#vm_missing[@]} -gt 0 ]; then
    if [ "$(uname -m)" != x86_64 ] || ! command -v apt-get >/dev/null 2>&1; then
        echo "setup: the VM and capture tests need ${vm_missing[*]} (Debian package names);" \
            "install them by hand on this machine" >&2
    else
        sudo=()
        [ "$(id -u)" = 0 ] || sudo=(sudo)
        echo "setup: installing ${vm_missing[*]} for the VM and capture tests"
        "${sudo[@]}" apt-get update -qq
        DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq \
            --no-install-recommends "${vm_missing[@]}" >/dev/null
    fi
fi

echo "setup: $(cargo --version), rustfmt and clippy present"
if [ ${#vm_missing[@]} -eq 0 ]; then
    echo "setup: VM, interop and capture test packages present (qemu, kernel, busybox-static, cpio, kmod, rdma-core's tools and libraries, librdmacm-dev, rdmacm-utils and qperf, pyverbs, UCX, Open MPI, perftest, tshark, chromium)"
fi
if command -v qemu-system-x86_64 >/dev/null 2>&1 &&
    ! qemu-system-x86_64 -device help 2>/dev/null | grep -q '"pvrdma"'; then
    echo "setup: $(qemu-system-x86_64 --version | head -1) has no pvrdma device: the PVRDMA VM test (tests/pvrdma/run.sh) needs QEMU 7.2 to 9.0 and will fail" >&2
fi

# UCX opens a device only if /dev/infiniband/<dev_name> is a character
# device it may read and write. The drop-in names device N `uverbsN`, as
# the kernel would; no kernel module stands behind these nodes (opening
# one fails with ENXIO), so they are made here, once, with the kernel's
# uverbs numbers (major 231, minor 192 + N), readable and writable by all
# as udev makes them.
if [ -w /dev ] || [ -d /dev/infiniband ]; then
    sudo=()
    [ "$(id -u)" = 0 ] || sudo=(sudo)
    "${sudo[@]}" mkdir -p /dev/infiniband
    for n in $(seq 0 15); do
        node=/dev/infiniband/uverbs$n
        [ -c "$node" ] || "${sudo[@]}" mknod -m 666 "$node" c 231 $((192 + n)) 2>/dev/null ||
            echo "setup: cannot make $node (UCX will not see rnic device $n)" >&2
    done
fi

