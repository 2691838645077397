//! The guest half of the VFIO VM test (`tests/vm/run.sh`): drives QEMU's
//! `edu` PCI device through `rnic-vfio` inside a VM with an emulated Intel
//! IOMMU, and checks the errors for devices VFIO cannot open.
//!
//! ```text
//! edu_check errors     EDU_BDF OTHER_BDF   # before binding: wrong/unbound/other driver
//! edu_check not-viable BDF                 # BDF's group has a device on a host driver
//! edu_check shared     EDU_BDF OTHER_BDF   # two functions of one group, one DMA space
//! edu_check no-reset   BDF                 # an edu without a reset method
//! edu_check busy       BDF                 # BDF's group is held open by another process
//! edu_check msix       BDF                 # a virtio device: MSI-X on and off
//! edu_check run        EDU_BDF             # the full check of one edu
//! edu_check middleware EDU_BDF             # TraceHal and FaultHal over VFIO
//! ```
//!
//! `run` prints `expect DMAR fault: Request device [BB:DD.F] fault addr
//! 0xPAGE` for the DMA it sends to an unmapped IOVA; the VM script looks
//! for exactly that fault in the guest kernel's log.
//!
//! Each check prints `ok   NAME` or `FAIL NAME: why`; the last line is
//! `edu_check MODE: N passed, M failed` and the exit status is 0 only when
//! nothing failed.
//!
//! edu (QEMU `hw/misc/edu.c`), BAR 0: 0x00 ID (0x010000ed), 0x04 liveness
//! (reads back inverted), 0x08 factorial, 0x20 status (bit 0 computing, bit
//! 7 raise an interrupt when done), 0x24 interrupt status, 0x60 raise
//! interrupt, 0x64 acknowledge, 0x80 DMA source, 0x88 DMA destination, 0x90
//! DMA count, 0x98 DMA command (bit 0 start, bit 1 device to RAM, bit 2
//! interrupt when done). Its DMA buffer is at device address 0x40000 (4
//! KiB), its DMA mask 28 bits, and each DMA runs from a 100 ms timer. QEMU
//! 7.2's range check rejects a transfer that ends exactly at the end of the
//! buffer (and stops the VM with a "hardware error"), so transfers here are
//! at most 2 KiB.

use std::panic::AssertUnwindSafe;
use std::process::ExitCode;
use std::ptr::NonNull;
use std::sync::Arc;

use rnic_middleware::{FaultHal, Memory, Sink, Timeline, TraceHal};
use rnic_queues::{Hal, HalError};
use rnic_vfio::{
    hugepage_counts, Backing, Container, HugePages, IrqKind, IrqMode, Paths, PciAddress,
    VfioDevice, VfioError, VfioHal, VfioOptions, PCI_COMMAND, PCI_COMMAND_MASTER,
};

const EDU_ID: u32 = 0x010000ed;
const REG_ID: usize = 0x00;
const REG_LIVENESS: usize = 0x04;
const REG_FACTORIAL: usize = 0x08;
const REG_STATUS: usize = 0x20;
const REG_IRQ_STATUS: usize = 0x24;
const REG_IRQ_RAISE: usize = 0x60;
const REG_IRQ_ACK: usize = 0x64;
const REG_DMA_SRC: usize = 0x80;
const REG_DMA_DST: usize = 0x88;
const REG_DMA_COUNT: usize = 0x90;
const REG_DMA_CMD: usize = 0x98;
const DMA_START: u64 = 1;
const DMA_TO_RAM: u64 = 2;
const DMA_IRQ: u64 = 4;
const DMA_DONE_IRQ_STATUS: u32 = 0x100;
const EDU_BUF: u64 = 0x40000;
/// Bytes per DMA round trip (see the note on QEMU 7.2 above).
const XFER: usize = 2048;
const SECOND: u64 = 1_000_000_000;

#[derive(Default)]
struct Checks {
    passed: u32,
    failed: u32,
}

impl Checks {
    fn check(&mut self, name: &str, ok: bool, detail: impl FnOnce() -> String) -> bool {
        if ok {
            self.passed += 1;
            println!("ok   {name}");
        } else {
            self.failed += 1;
            println!("FAIL {name}: {}", detail());
        }
        ok
    }

    /// Checks that `r` is an error whose message contains every needle.
    fn error<T>(
        &mut self,
        name: &str,
        r: Result<T, VfioError>,
        is_kind: fn(&VfioError) -> bool,
        needles: &[&str],
    ) {
        match r {
            Ok(_) => {
                self.check(name, false, || "opened, expected an error".into());
            }
            Err(e) => {
                let m = e.to_string();
                println!("---- {name}: the error reads:\n{m}\n----");
                let missing: Vec<&&str> = needles.iter().filter(|n| !m.contains(**n)).collect();
                self.check(name, is_kind(&e) && missing.is_empty(), || {
                    format!("kind {e:?}, missing {missing:?}")
                });
            }
        }
    }
}

fn main() -> ExitCode {
    // Info and above unless RUST_LOG says otherwise (RUST_LOG=debug).
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info")).init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut c = Checks::default();
    let mode = args.first().map(String::as_str).unwrap_or("");
    match (mode, &args[1..]) {
        ("errors", [edu, other]) => errors(&mut c, edu, other),
        ("not-viable", [bdf]) => not_viable(&mut c, bdf),
        ("shared", [edu, other]) => shared(&mut c, edu, other),
        ("no-reset", [bdf]) => no_reset(&mut c, bdf),
        ("busy", [bdf]) => busy(&mut c, bdf),
        ("msix", [bdf]) => msix(&mut c, bdf),
        ("run", [bdf]) => run(&mut c, bdf),
        ("middleware", [bdf]) => middleware(&mut c, bdf),
        _ => {
            eprintln!(
                "usage: edu_check errors EDU OTHER | not-viable BDF | shared EDU OTHER | \
                 no-reset BDF | busy BDF | msix BDF | run EDU | middleware EDU"
            );
            return ExitCode::from(2);
        }
    }
    println!("edu_check {mode}: {} passed, {} failed", c.passed, c.failed);
    if c.failed == 0 && c.passed > 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// Opening what VFIO cannot open, before edu is bound to vfio-pci.
fn errors(c: &mut Checks, edu: &str, other: &str) {
    c.error(
        "malformed address",
        VfioHal::open("00:01"),
        |e| matches!(e, VfioError::BadAddress { .. }),
        &["is not a PCI address", "lspci -D"],
    );
    c.error(
        "wrong PCI address",
        VfioHal::open("0000:00:1e.7"),
        |e| matches!(e, VfioError::NoSuchDevice { .. }),
        &["no PCI device 0000:00:1e.7", "lspci -D", edu],
    );
    let unbind = format!("echo {other} > /sys/bus/pci/devices/{other}/driver/unbind");
    let override_edu = format!("echo vfio-pci > /sys/bus/pci/devices/{edu}/driver_override");
    let probe_edu = format!("echo {edu} > /sys/bus/pci/drivers_probe");
    c.error(
        "edu not bound to any driver",
        VfioHal::open(edu),
        |e| matches!(e, VfioError::NotBound { driver: None, .. }),
        &[
            "not bound to any driver",
            "[1234:11e8]",
            &override_edu,
            &probe_edu,
        ],
    );
    c.error(
        "device bound to virtio-pci",
        VfioHal::open(other),
        |e| {
            matches!(
                e,
                VfioError::NotBound {
                    driver: Some(_),
                    ..
                }
            )
        },
        &[
            "bound to the kernel driver virtio-pci",
            &unbind,
            "driver_override",
        ],
    );
}

/// A group with a device still on a host driver.
fn not_viable(c: &mut Checks, bdf: &str) {
    c.error(
        "group not viable",
        VfioHal::open(bdf),
        |e| matches!(e, VfioError::GroupNotViable { .. }),
        &[
            "is not viable",
            "virtio-pci  <- rebind",
            "(bridge): no driver",
        ],
    );
}

/// Two functions of one IOMMU group (an edu and a virtio device behind a
/// PCI bridge), each with its own `VfioHal`: one container, one DMA space.
fn shared(c: &mut Checks, edu: &str, other: &str) {
    let a = match open_edu(edu, HugePages::Prefer) {
        Ok(h) => h,
        Err(e) => {
            c.check("open the group's edu", false, || e.to_string());
            return;
        }
    };
    c.check("open the group's edu", true, String::new);
    let b_opts = VfioOptions::default()
        .dma_mask_bits(28)
        .hugepages(HugePages::Prefer);
    let b = match VfioHal::open_with(other, &b_opts) {
        Ok(h) => h,
        Err(e) => {
            c.check("open the group's other function too", false, || {
                e.to_string()
            });
            return;
        }
    };
    c.check(
        "open the group's other function too (I/O BAR on pread, MSI-X)",
        true,
        String::new,
    );
    c.check(
        "both in one container, same group",
        Arc::ptr_eq(a.device().container(), b.device().container())
            && a.device().group() == b.device().group(),
        || format!("groups {} {}", a.device().group(), b.device().group()),
    );

    // Memory allocated through one VfioHal, used by the other's device.
    let (src, dst) = match (b.dma_alloc(4096), a.dma_alloc(4096)) {
        (Ok(s), Ok(d)) => (s, d),
        (s, d) => {
            c.check("dma_alloc through both", false, || format!("{s:?} {d:?}"));
            return;
        }
    };
    let (sa, sb) = (a.dma_stats(), b.dma_stats());
    c.check(
        "one DMA space: both see both allocations",
        sa == sb && sa.mappings == 2 && src.iova() != dst.iova(),
        || format!("{sa:?} / {sb:?}"),
    );
    let pattern: Vec<u8> = (0..XFER as u32).map(|i| (i * 13 + 1) as u8).collect();
    src.write_bytes(0, &pattern);
    let r = edu_dma(&a, src.iova(), EDU_BUF, XFER as u64, false)
        .and_then(|_| edu_dma(&a, EDU_BUF, dst.iova(), XFER as u64, true));
    let mut got = vec![0u8; XFER];
    dst.read_bytes(0, &mut got);
    c.check(
        "edu DMA from memory allocated through the other function's VfioHal",
        r.is_ok() && got == pattern,
        || format!("{r:?}, data intact {}", got == pattern),
    );

    // What cannot be shared, and the errors saying so.
    let other_addr = PciAddress::parse(other).expect("a PCI address");
    let elsewhere =
        Container::open().and_then(|ct| VfioDevice::open_in(&ct, other_addr, &Paths::default()));
    c.error(
        "the group in a second container of this process",
        elsewhere,
        |e| matches!(e, VfioError::GroupInOtherContainer { .. }),
        &["already open in this process", "another VFIO container"],
    );
    c.error(
        "a device of the group opened twice",
        VfioHal::open_with(edu, &edu_options(HugePages::Prefer)),
        |e| matches!(e, VfioError::DeviceAlreadyOpen { .. }),
        &["is already open in this process"],
    );
    drop(b);
    c.error(
        "a VfioHal with another DMA limit in the shared space",
        VfioHal::open_with(other, &b_opts.clone().dma_mask_bits(32)),
        |e| matches!(e, VfioError::Unsupported { .. }),
        &["same options", "dma_limit 0xfffffff;"],
    );

    // `src` came from the dropped VfioHal: the shared space still has it.
    // SAFETY: the DMAs are complete.
    unsafe {
        a.dma_free(src);
        a.dma_free(dst);
    }
    let s = a.dma_stats();
    c.check(
        "both freed through the remaining VfioHal",
        s.mappings == 0 && s.pool_used == 0 && s.leaked == 0,
        || format!("{s:?}"),
    );
}

/// A group whose node another process holds open.
fn busy(c: &mut Checks, bdf: &str) {
    c.error(
        "group held open by another process",
        VfioHal::open(bdf),
        |e| matches!(e, VfioError::GroupBusy { .. }),
        &["already open by another process", "fuser -v /dev/vfio/"],
    );
}

/// An edu on the root bus: no FLR, no PM reset, no bus to reset.
fn no_reset(c: &mut Checks, bdf: &str) {
    let dev = match VfioDevice::open(bdf) {
        Ok(d) => d,
        Err(e) => {
            c.check("open", false, || e.to_string());
            return;
        }
    };
    c.check("open edu on the root bus", true, String::new);
    c.check("kernel has no reset for it", !dev.can_reset(), || {
        "VFIO_DEVICE_FLAGS_RESET is set".into()
    });
    c.error(
        "reset reports unsupported",
        dev.reset(),
        |e| matches!(e, VfioError::Unsupported { .. }),
        &["no reset method", "reset_method"],
    );
}

/// MSI-X on a virtio device (edu has only MSI): enable, see the enable bit
/// in its MSI-X capability, disable.
fn msix(c: &mut Checks, bdf: &str) {
    let dev = match VfioDevice::open(bdf) {
        Ok(d) => d,
        Err(e) => {
            c.check("open", false, || e.to_string());
            return;
        }
    };
    // BAR 0 of a transitional virtio device is an I/O port BAR, which VFIO
    // does not let a process mmap: it is read with pread. Its first
    // register is the legacy device feature bits.
    let bar0 = dev.bar(0);
    c.check(
        "I/O BAR 0 present, not mmapped",
        bar0.is_some_and(|b| b.is_io() && b.mmio().is_none()),
        || format!("{bar0:?}"),
    );
    if bar0.is_some() {
        let features = dev.read32(0, 0);
        c.check(
            "pread of BAR 0 reads the device features",
            features != 0 && features != u32::MAX,
            || format!("{features:#x}"),
        );
        // vfio-pci would split an 8-byte pwrite into two 4-byte writes.
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let r = std::panic::catch_unwind(AssertUnwindSafe(|| dev.write64(0, 0, 0)));
        std::panic::set_hook(hook);
        let msg = r
            .err()
            .and_then(|p| p.downcast::<String>().ok())
            .map_or_else(String::new, |m| *m);
        c.check(
            "a 64-bit write through pwrite is refused",
            msg.contains("two 32-bit writes"),
            || format!("panic message {msg:?}"),
        );
    }
    let info = dev.irq_info(IrqKind::Msix);
    let n = info.map_or(0, |q| q.count);
    c.check("device offers MSI-X", n > 0, || format!("{info:?}"));
    let Some(cap) = find_cap(&dev, 0x11) else {
        c.check("MSI-X capability", false, || {
            "not in the capability list".into()
        });
        return;
    };
    let enabled = |d: &VfioDevice| d.config_read16(cap + 2).map(|v| v & 0x8000 != 0);
    c.check(
        "MSI-X off before",
        enabled(&dev).ok() == Some(false),
        String::new,
    );
    match dev.enable_irqs(IrqKind::Msix, n) {
        Ok(v) => {
            c.check(
                "enable all MSI-X vectors on eventfds",
                v.len() == n as usize,
                || format!("{} vectors", v.len()),
            );
        }
        Err(e) => {
            c.check("enable MSI-X", false, || e.to_string());
        }
    }
    c.check(
        "MSI-X enable bit set",
        enabled(&dev).ok() == Some(true),
        String::new,
    );
    let t0 = std::time::Instant::now();
    let r = dev.wait_irq(0, SECOND / 20);
    c.check(
        "wait on an idle vector times out",
        matches!(r, Ok(false)) && t0.elapsed().as_millis() >= 50,
        || format!("{r:?} after {:?}", t0.elapsed()),
    );
    c.check("disable MSI-X", dev.disable_irqs().is_ok(), String::new);
    c.check(
        "MSI-X enable bit clear",
        enabled(&dev).ok() == Some(false),
        String::new,
    );
    // virtio-pci devices have MSI-X only: no MSI capability, so VFIO
    // reports no MSI vectors and enabling MSI is refused.
    let msi_cap = find_cap(&dev, 0x05);
    let msi = dev.irq_info(IrqKind::Msi).map_or(0, |q| q.count);
    let r = dev.enable_irqs(IrqKind::Msi, 1);
    c.check(
        "no MSI capability: no MSI vectors, enabling MSI is Unsupported",
        msi_cap.is_none() && msi == 0 && matches!(r, Err(VfioError::Unsupported { .. })),
        || format!("MSI capability {msi_cap:?}, {msi} vectors, enable: {r:?}"),
    );
}

fn find_cap(dev: &VfioDevice, id: u8) -> Option<u64> {
    let mut at = dev.config_read16(0x34).ok()? as u64 & 0xfc;
    for _ in 0..48 {
        if at == 0 {
            return None;
        }
        let hdr = dev.config_read16(at).ok()?;
        if hdr as u8 == id {
            return Some(at);
        }
        at = (hdr >> 8) as u64 & 0xfc;
    }
    None
}

fn locked_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmLck:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Runs one edu DMA and waits for its completion interrupt.
fn edu_dma(hal: &impl Hal, src: u64, dst: u64, len: u64, to_ram: bool) -> Result<(), String> {
    hal.mmio_write64(0, REG_DMA_SRC, src);
    hal.mmio_write64(0, REG_DMA_DST, dst);
    hal.mmio_write64(0, REG_DMA_COUNT, len);
    let cmd = DMA_START | DMA_IRQ | if to_ram { DMA_TO_RAM } else { 0 };
    hal.mmio_write64(0, REG_DMA_CMD, cmd);
    let fired = hal
        .wait_irq(0, 5 * SECOND)
        .map_err(|e| format!("wait_irq: {e}"))?;
    let status = hal.mmio_read32(0, REG_IRQ_STATUS);
    hal.mmio_write32(0, REG_IRQ_ACK, status);
    let busy = hal.mmio_read32(0, REG_DMA_CMD) & 1;
    if !fired {
        return Err(format!(
            "no completion interrupt in 5 s (status {status:#x})"
        ));
    }
    if status & DMA_DONE_IRQ_STATUS == 0 || busy != 0 {
        return Err(format!("interrupt status {status:#x}, busy {busy}"));
    }
    Ok(())
}

fn edu_options(hugepages: HugePages) -> VfioOptions {
    VfioOptions::default()
        .dma_mask_bits(28) // edu's default dma_mask
        .hugepages(hugepages)
        .irqs(IrqMode::Msi(1))
}

fn open_edu(bdf: &str, hugepages: HugePages) -> Result<VfioHal, VfioError> {
    VfioHal::open_with(bdf, &edu_options(hugepages))
}

/// rnic-middleware over the VFIO platform: TraceHal records the register
/// accesses and DMA memory of a real device (decoded with rnic's register
/// names, which at offset 0 happen to agree with edu's), FaultHal changes
/// a register read and fails an allocation, and a DMA round trip with its
/// interrupt runs through both.
fn middleware(c: &mut Checks, bdf: &str) {
    let vfio = match open_edu(bdf, HugePages::Prefer) {
        Ok(h) => h,
        Err(e) => {
            c.check("open edu", false, || e.to_string());
            return;
        }
    };
    let (faulty, faults) = FaultHal::new(vfio);
    let trace = Arc::new(Memory::default());
    let sink: Arc<dyn Sink> = trace.clone();
    let hal = TraceHal::new(faulty, Timeline::new(vec![sink]));
    let id = hal.mmio_read32(0, REG_ID);
    c.check(
        "ID register reads 0x010000ed through both",
        id == EDU_ID,
        || format!("{id:#x}"),
    );
    let texts = || -> Vec<String> { trace.events().into_iter().map(|e| e.text).collect() };
    c.check(
        "the trace has the read",
        texts()
            .iter()
            .any(|t| t == "MMIO BAR0+0x000 ID -> 0x10000ed"),
        || format!("{:?}", texts()),
    );
    faults.set(|f| f.reads.push((0, REG_LIVENESS, 0x0bad_cafe)));
    hal.mmio_write32(0, REG_LIVENESS, 0x1234_5678);
    let wrong = hal.mmio_read32(0, REG_LIVENESS);
    faults.set(|f| f.reads.clear());
    let right = hal.mmio_read32(0, REG_LIVENESS);
    c.check(
        "FaultHal's read fault, then the device's own value",
        wrong == 0x0bad_cafe && right == 0xedcb_a987 && faults.injected().reads == 1,
        || format!("{wrong:#x} then {right:#x}"),
    );
    faults.set(|f| f.fail_dma_allocs = 1);
    let refused = hal.dma_alloc(4096);
    c.check(
        "FaultHal fails one dma_alloc",
        matches!(refused, Err(HalError::NoMemory)),
        || format!("{refused:?}"),
    );
    let (src, dst) = match (hal.dma_alloc(4096), hal.dma_alloc(4096)) {
        (Ok(s), Ok(d)) => (s, d),
        (s, d) => {
            c.check("dma_alloc", false, || format!("{s:?} {d:?}"));
            return;
        }
    };
    let pattern: Vec<u8> = (0..XFER as u32).map(|i| (i * 13 + 1) as u8).collect();
    src.write_bytes(0, &pattern);
    let r = edu_dma(&hal, src.iova(), EDU_BUF, XFER as u64, false)
        .and_then(|()| edu_dma(&hal, EDU_BUF, dst.iova(), XFER as u64, true));
    let mut got = vec![0u8; XFER];
    dst.read_bytes(0, &mut got);
    c.check(
        "a DMA round trip and its interrupts through both",
        r.is_ok() && got == pattern,
        || format!("{r:?}"),
    );
    let alloc = format!("DMA alloc 4096 B at iova {:#x}", src.iova());
    let (s_iova, d_iova) = (src.iova(), dst.iova());
    // SAFETY: the regions came from this platform, and edu is idle.
    unsafe {
        hal.dma_free(src);
        hal.dma_free(dst);
    }
    let t = texts();
    c.check(
        "the trace has the allocations and frees",
        t.contains(&alloc)
            && t.contains(&format!("DMA free iova {s_iova:#x}"))
            && t.contains(&format!("DMA free iova {d_iova:#x}")),
        || format!("{t:?}"),
    );
}

/// The full check of one edu bound to vfio-pci.
fn run(c: &mut Checks, bdf: &str) {
    let (_, huge_free0) = hugepage_counts();
    let locked0 = locked_kib();
    // The VM reserves 2 MiB hugepages (hugepages=16): the pool must use them.
    c.check("the guest has free hugepages", huge_free0 > 0, || {
        "HugePages_Free 0".into()
    });
    let hal = match open_edu(bdf, HugePages::Require) {
        Ok(h) => h,
        Err(e) => {
            c.check("open edu", false, || e.to_string());
            return;
        }
    };
    let dev = hal.device();
    c.check(
        "open edu through VFIO (type1 IOMMU, MSI)",
        true,
        String::new,
    );
    if let Some(info) = dev.container().iommu_info() {
        println!(
            "     IOMMU {:?}, page sizes {:#x}, IOVA ranges {:x?}, DMA mappings available {:?}",
            info.kind, info.page_sizes, info.iova_ranges, info.dma_avail
        );
        c.check(
            "IOVA ranges exclude the MSI window",
            !info.iova_ranges.is_empty()
                && info
                    .iova_ranges
                    .iter()
                    .all(|&(s, e)| e < 0xfee0_0000 || s > 0xfeef_ffff),
            || format!("{:x?}", info.iova_ranges),
        );
    }
    let bar0 = dev.bar(0);
    c.check(
        "BAR 0 is 1 MiB and mmapped",
        bar0.is_some_and(|b| b.len() == 1 << 20 && b.mmio().is_some()),
        || format!("{bar0:?}"),
    );
    let ids = dev.config_read32(0);
    c.check(
        "config space vendor:device 1234:11e8",
        matches!(ids, Ok(0x11e8_1234)),
        || format!("{ids:x?}"),
    );
    let cmd = dev.config_read16(PCI_COMMAND).unwrap_or(0);
    c.check("bus master enabled", cmd & PCI_COMMAND_MASTER != 0, || {
        format!("command {cmd:#x}")
    });

    // Registers.
    let id = hal.mmio_read32(0, REG_ID);
    c.check("ID register reads 0x010000ed", id == EDU_ID, || {
        format!("{id:#x}")
    });
    hal.mmio_write32(0, REG_LIVENESS, 0x1234_5678);
    let live = hal.mmio_read32(0, REG_LIVENESS);
    c.check("liveness register inverts", live == 0xedcb_a987, || {
        format!("{live:#x}")
    });
    hal.mmio_write32(0, REG_FACTORIAL, 10);
    let t0 = hal.now_ns();
    while hal.mmio_read32(0, REG_STATUS) & 1 != 0 && hal.now_ns() - t0 < SECOND {
        hal.relax();
    }
    let f = hal.mmio_read32(0, REG_FACTORIAL);
    c.check("factorial(10) = 3628800", f == 3_628_800, || f.to_string());

    // DMA round trip: pool page -> edu buffer -> another pool page.
    let (src, dst) = match (hal.dma_alloc(4096), hal.dma_alloc(4096)) {
        (Ok(s), Ok(d)) => (s, d),
        (s, d) => {
            c.check("dma_alloc", false, || format!("{s:?} {d:?}"));
            return;
        }
    };
    c.check(
        "DMA buffers page-aligned, below the 28-bit DMA mask, not at IOVA 0",
        [&src, &dst].iter().all(|r| {
            r.iova() % 4096 == 0
                && r.iova() != 0
                && r.iova() + 4096 <= 1 << 28
                && r.vaddr().as_ptr() as usize % 4096 == 0
        }),
        || format!("src {:#x} dst {:#x}", src.iova(), dst.iova()),
    );
    let mut zero = [0xffu8; 4096];
    dst.read_bytes(0, &mut zero);
    c.check(
        "dma_alloc memory is zeroed",
        zero.iter().all(|&b| b == 0),
        String::new,
    );
    let (_, huge_free1) = hugepage_counts();
    let backing = if huge_free1 < huge_free0 {
        Backing::HugePages
    } else {
        Backing::LockedPages
    };
    println!(
        "     DMA pool backing: {backing:?} (hugepages free {huge_free0} -> {huge_free1}, \
         VmLck {locked0} -> {} KiB)",
        locked_kib()
    );
    c.check(
        "DMA pool uses the 2 MiB hugepages the guest reserved",
        backing == Backing::HugePages,
        || format!("hugepages free {huge_free0} -> {huge_free1}"),
    );
    let pattern: Vec<u8> = (0..XFER as u32).map(|i| (i * 7 + 3) as u8).collect();
    src.write_bytes(0, &pattern);
    let r1 = edu_dma(&hal, src.iova(), EDU_BUF, XFER as u64, false);
    c.check(
        "DMA RAM -> edu through the IOMMU, MSI on completion",
        r1.is_ok(),
        || r1.clone().unwrap_err(),
    );
    let r2 = edu_dma(&hal, EDU_BUF, dst.iova(), XFER as u64, true);
    c.check(
        "DMA edu -> RAM through the IOMMU, MSI on completion",
        r2.is_ok(),
        || r2.clone().unwrap_err(),
    );
    let mut got = vec![0u8; XFER];
    dst.read_bytes(0, &mut got);
    c.check("DMA round trip data intact", got == pattern, || {
        let bad = got
            .iter()
            .zip(&pattern)
            .position(|(a, b)| a != b)
            .unwrap_or(0);
        format!("first difference at byte {bad}")
    });

    // A caller's buffer (dma_map), not page-aligned: edu writes into it.
    let mut user = vec![0u8; 3 * 4096];
    let off = (4096 - user.as_ptr() as usize % 4096) % 4096 + 256;
    let user_ptr = NonNull::new(user[off..].as_mut_ptr()).unwrap();
    let before = hal.dma_stats();
    // SAFETY: `user` lives until after the dma_unmap below, and the device
    // writes it only during the DMA this test starts.
    let iova = unsafe { hal.dma_map(user_ptr, 1024) };
    match iova {
        Ok(iova) => {
            c.check("dma_map keeps the page offset", iova % 4096 == 256, || {
                format!("iova {iova:#x}")
            });
            let r = edu_dma(&hal, EDU_BUF, iova, 1024, true);
            c.check("DMA edu -> dma_map'd buffer", r.is_ok(), || {
                r.clone().unwrap_err()
            });
            c.check(
                "dma_map'd buffer got the DMA's 1024 bytes (edu wrote no more)",
                user[off..off + 1024] == pattern[..1024] && user[off + 1024] == 0,
                String::new,
            );
            // SAFETY: exactly the iova and length of the dma_map above.
            let u = unsafe { hal.dma_unmap(iova, 1024) };
            c.check("dma_unmap", u.is_ok(), || format!("{u:?}"));
            // SAFETY: as above; it is no longer mapped.
            let u2 = unsafe { hal.dma_unmap(iova, 1024) };
            c.check(
                "second dma_unmap is NotMapped",
                u2 == Err(HalError::NotMapped),
                || format!("{u2:?}"),
            );
            let after = hal.dma_stats();
            c.check(
                "unmap gave back the mapping and its IOVA",
                after.mappings == before.mappings && after.iova_free == before.iova_free,
                || format!("{before:?} -> {after:?}"),
            );
            // DMA to the unmapped IOVA must not reach the buffer: the IOMMU
            // faults it (the guest kernel logs a DMAR fault).
            user.fill(0x5a);
            // The fault the guest kernel must log: the requester ID and the
            // IOVA's page (VT-d records page addresses).
            let a = dev.address();
            println!(
                "     expect DMAR fault: Request device [{:02x}:{:02x}.{}] fault addr {:#x}",
                a.bus,
                a.device,
                a.function,
                iova & !0xfff
            );
            let _ = edu_dma(&hal, EDU_BUF, iova, 1024, true);
            c.check(
                "DMA after unmap does not reach the buffer",
                user.iter().all(|&b| b == 0x5a),
                || {
                    let n = user.iter().filter(|&&b| b != 0x5a).count();
                    format!("{n} bytes changed")
                },
            );
        }
        Err(e) => {
            c.check("dma_map", false, || e.to_string());
        }
    }

    // MSI on request.
    let idle = hal.wait_irq(0, SECOND / 10);
    c.check(
        "wait_irq times out when nothing is raised",
        idle == Ok(false),
        || format!("{idle:?}"),
    );
    hal.mmio_write32(0, REG_IRQ_RAISE, 0x5a);
    let fired = hal.wait_irq(0, 5 * SECOND);
    let status = hal.mmio_read32(0, REG_IRQ_STATUS);
    hal.mmio_write32(0, REG_IRQ_ACK, status);
    c.check(
        "MSI raised by the device arrives on the eventfd",
        fired == Ok(true) && status == 0x5a,
        || format!("{fired:?}, status {status:#x}"),
    );
    let other = hal.wait_irq(3, 0);
    c.check(
        "wait on a vector not enabled is Unsupported",
        other == Err(HalError::Unsupported),
        || format!("{other:?}"),
    );

    // Reset: the kernel resets edu (secondary bus reset through its root
    // port) and restores its config space; the device works after it.
    let reset = dev.reset();
    c.check("VFIO_DEVICE_RESET", reset.is_ok(), || format!("{reset:?}"));
    let id = hal.mmio_read32(0, REG_ID);
    let cmd = dev.config_read16(PCI_COMMAND).unwrap_or(0);
    c.check(
        "device answers after reset, bus master restored",
        id == EDU_ID && cmd & PCI_COMMAND_MASTER != 0,
        || format!("id {id:#x}, command {cmd:#x}"),
    );
    let r = edu_dma(&hal, src.iova(), EDU_BUF, XFER as u64, false)
        .and_then(|_| edu_dma(&hal, EDU_BUF, dst.iova(), XFER as u64, true));
    c.check("DMA and MSI work after reset", r.is_ok(), || {
        r.clone().unwrap_err()
    });

    // A second open of the same device while it is open.
    c.error(
        "second open of the device in this process is refused",
        VfioHal::open_with(bdf, &edu_options(HugePages::Require)),
        |e| matches!(e, VfioError::DeviceAlreadyOpen { .. }),
        &["is already open in this process"],
    );

    // Teardown: free, drop, everything back; reopen works.
    // SAFETY: the device is idle; nothing uses the buffers any more.
    unsafe {
        hal.dma_free(src);
        hal.dma_free(dst);
    }
    let s = hal.dma_stats();
    c.check(
        "dma_free unmapped everything",
        s.mappings == 0 && s.pool_used == 0 && s.leaked == 0,
        || format!("{s:?}"),
    );
    drop(hal);
    let (_, huge_free2) = hugepage_counts();
    c.check(
        "drop returned the pool's memory",
        huge_free2 == huge_free0 && locked_kib() == locked0,
        || {
            format!(
                "hugepages free {huge_free0} -> {huge_free2}, VmLck {locked0} -> {}",
                locked_kib()
            )
        },
    );
    match open_edu(bdf, HugePages::Never) {
        Ok(hal) => {
            let id = hal.mmio_read32(0, REG_ID);
            c.check("reopen after drop works", id == EDU_ID, || {
                format!("{id:#x}")
            });
            // Locked 4 KiB pages this time.
            match hal.dma_alloc(8192) {
                Ok(r) => {
                    r.write_bytes(0, &pattern);
                    let res = edu_dma(&hal, r.iova(), EDU_BUF, XFER as u64, false);
                    c.check("DMA from mlock'd pool pages", res.is_ok(), || {
                        res.clone().unwrap_err()
                    });
                    // At least the 2 MiB chunk mlock'd (VFIO's pinning
                    // of the 8 KiB mapped comes on top).
                    c.check(
                        "the mlock'd 2 MiB chunk is accounted",
                        locked_kib() >= locked0 + 2048,
                        || format!("VmLck {} KiB, was {locked0}", locked_kib()),
                    );
                    // SAFETY: the DMA is complete.
                    unsafe { hal.dma_free(r) };
                }
                Err(e) => {
                    c.check("dma_alloc from locked pages", false, || e.to_string());
                }
            }
            drop(hal);
            c.check(
                "locked pages released on drop",
                locked_kib() == locked0,
                || format!("VmLck {} KiB, was {locked0}", locked_kib()),
            );
        }
        Err(e) => {
            c.check("reopen after drop", false, || e.to_string());
        }
    }
    reuse_container(c, bdf, &pattern);
}

/// One container used again after its last device closed (the kernel
/// drops a container's IOMMU backend with its last group), and a DMA
/// region that outlives its `VfioHal`.
fn reuse_container(c: &mut Checks, bdf: &str, pattern: &[u8]) {
    let addr = PciAddress::parse(bdf).expect("a PCI address");
    let paths = Paths::default();
    let container = match Container::open() {
        Ok(ct) => ct,
        Err(e) => {
            c.check("open a container", false, || e.to_string());
            return;
        }
    };
    let first = VfioDevice::open_in(&container, addr, &paths);
    c.check("open in an explicit container", first.is_ok(), || {
        format!("{:?}", first.as_ref().err())
    });
    drop(first);
    c.check(
        "no IOMMU info once its last group closed",
        container.iommu_info().is_none(),
        || format!("{:?}", container.iommu_info()),
    );
    let dev = match VfioDevice::open_in(&container, addr, &paths) {
        Ok(d) => d,
        Err(e) => {
            c.check(
                "reopen in the same container after its last device closed",
                false,
                || e.to_string(),
            );
            return;
        }
    };
    c.check(
        "reopen in the same container after its last device closed",
        container.iommu_info().is_some(),
        || "no IOMMU info".into(),
    );
    let hal = match VfioHal::new(dev, &edu_options(HugePages::Prefer)) {
        Ok(h) => h,
        Err(e) => {
            c.check("VfioHal in the reused container", false, || e.to_string());
            return;
        }
    };
    let region = match hal.dma_alloc(4096) {
        Ok(r) => r,
        Err(e) => {
            c.check("dma_alloc in the reused container", false, || e.to_string());
            return;
        }
    };
    region.write_bytes(0, &pattern[..XFER]);
    let r = edu_dma(&hal, region.iova(), EDU_BUF, XFER as u64, false).and_then(|_| {
        edu_dma(
            &hal,
            EDU_BUF,
            region.iova() + XFER as u64,
            XFER as u64,
            true,
        )
    });
    let mut got = vec![0u8; XFER];
    region.read_bytes(XFER, &mut got);
    c.check(
        "DMA through the reused container's IOMMU",
        r.is_ok() && got == pattern[..XFER],
        || format!("{r:?}"),
    );
    // Dropped with the region still held: the IOMMU mapping goes, the
    // memory stays (leaked, with a warning) for the region's holder.
    drop(hal);
    let first_word = u32::from_le_bytes(pattern[..4].try_into().unwrap());
    let w = region.read::<u32>(0);
    c.check(
        "a DmaRegion that outlives its VfioHal stays readable",
        w == first_word,
        || format!("{w:#x}"),
    );
}
