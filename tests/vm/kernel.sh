# Sourced by the VM tests (tests/vm/run.sh, tests/interop/run.sh).
# vm_kernel MODULE: prints the kernel version to boot: $RNIC_VM_KERNEL if
# set, else the newest /boot/vmlinuz-* whose /lib/modules has MODULE
# (a module file name without .ko). Prints nothing if there is none.
vm_kernel() {
    if [ -n "${RNIC_VM_KERNEL:-}" ]; then
        echo "$RNIC_VM_KERNEL"
        return
    fi
    local k
    for k in $(ls /boot/vmlinuz-* 2>/dev/null | sed 's|.*/vmlinuz-||' | sort -V -r); do
        if [ -n "$(find "/lib/modules/$k" -name "$1.ko*" 2>/dev/null | head -1)" ]; then
            echo "$k"
            return
        fi
    done
}
