//! Another process's memory as the device reaches it: the memory a
//! vfio-user client registers without sharing it (a `malloc`ed buffer),
//! read and written through the kernel.
//!
//! The device opens `/proc/<pid>/mem` of the client once, when it
//! connects. The open checks ptrace access (the same user and a dumpable
//! process, or `CAP_SYS_PTRACE`; under Yama's `ptrace_scope` 1 the client
//! names the server with `PR_SET_PTRACER`), and the file stays bound to
//! that process's address space: once the process is gone, every access
//! fails, and a later process with the same pid is never reached. Each
//! access is one `pread` or `pwrite` at the virtual address; one that
//! does not complete (an address the process no longer maps) is a DMA
//! fault.

use std::fs::File;
use std::os::unix::fs::FileExt;

use rnic_hw_regs::cqe::Syndrome;

/// A process's memory, open for the device.
#[derive(Debug)]
pub struct ProcessMemory {
    file: File,
    pid: i32,
}

impl ProcessMemory {
    /// Opens the memory of process `pid`.
    pub fn open(pid: i32) -> std::io::Result<ProcessMemory> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(format!("/proc/{pid}/mem"))?;
        Ok(ProcessMemory { file, pid })
    }

    /// The process's ID.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Reads `buf.len()` bytes at virtual address `addr`.
    pub(crate) fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), Syndrome> {
        self.file.read_exact_at(buf, addr).map_err(|e| {
            log::debug!(
                "read of {} bytes at {addr:#x} of process {}: {e}",
                buf.len(),
                self.pid
            );
            Syndrome::DmaFault
        })
    }

    /// Writes `buf` at virtual address `addr`.
    pub(crate) fn write(&self, addr: u64, buf: &[u8]) -> Result<(), Syndrome> {
        self.file.write_all_at(buf, addr).map_err(|e| {
            log::debug!(
                "write of {} bytes at {addr:#x} of process {}: {e}",
                buf.len(),
                self.pid
            );
            Syndrome::DmaFault
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_writes_reach_the_process_and_an_unmapped_address_faults() {
        let mem = ProcessMemory::open(std::process::id() as i32).unwrap();
        let mut buf = vec![7u8; 10_000];
        let addr = buf.as_ptr() as u64;
        mem.write(addr + 3, b"hello").unwrap();
        let mut back = [0u8; 8];
        mem.read(addr + 2, &mut back).unwrap();
        assert_eq!(&back, b"\x07hello\x07\x07");
        buf[0] = 1;
        assert_eq!(buf[3], b'h');
        let mut x = [0u8; 8];
        assert_eq!(mem.read(8, &mut x), Err(Syndrome::DmaFault));
        assert_eq!(mem.write(8, &x), Err(Syndrome::DmaFault));
    }
}
