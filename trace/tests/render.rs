//! rnic-trace on a real trace: the device model brought up under
//! TraceHal, its trace written as JSON lines, turned into a page by the
//! binary, and the page rendered by headless Chromium (scripts/setup.sh
//! installs it): one row per event in its lane, each with its fields and
//! bytes.

use std::process::Command;
use std::sync::Arc;

use rnic_driver::{Context, QpCap, QpInit, QpType};
use rnic_emu::{EmuConfig, EmuDevice, ExecMode};
use rnic_middleware::{JsonLines, Timeline, TraceHal};

/// A trace of bring-up, a PD, a CQ and a QP, at `path`; its event count.
fn make_trace(path: &std::path::Path) -> usize {
    let sink = Arc::new(JsonLines::new(std::fs::File::create(path).unwrap()));
    let tl = Timeline::new(vec![sink]);
    tl.note("open the device");
    let dev = EmuDevice::new(EmuConfig::default(), ExecMode::Inline);
    let ctx = Context::open(TraceHal::new(dev.hal(), tl.clone())).unwrap();
    tl.note("make a PD, a CQ and a QP");
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(8).unwrap();
    let _qp = pd
        .create_qp(&QpInit {
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            cap: QpCap {
                max_send_wr: 4,
                max_recv_wr: 4,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            qp_type: QpType::Rc,
            sq_sig_all: false,
        })
        .unwrap();
    drop((_qp, cq, pd, ctx));
    std::fs::read_to_string(path).unwrap().lines().count()
}

#[test]
fn the_page_renders_every_event_in_its_lane() {
    let dir = std::env::temp_dir().join(format!("rnic-trace-render-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("bringup.jsonl");
    let n = make_trace(&trace);
    assert!(n > 50, "{n} events");
    let page = dir.join("bringup.html");
    let o = Command::new(env!("CARGO_BIN_EXE_rnic-trace"))
        .arg(&trace)
        .arg("-o")
        .arg(&page)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains(&format!("{n} events")));
    let dom = Command::new("chromium")
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--dump-dom"])
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("scripts/setup.sh installs chromium");
    assert!(
        dom.status.success(),
        "{}",
        String::from_utf8_lossy(&dom.stderr)
    );
    let dom = String::from_utf8_lossy(&dom.stdout);
    std::fs::remove_dir_all(&dir).unwrap();
    // Every event is a row the script drew, in its lane.
    assert_eq!(dom.matches("<tr class=\"event lane-").count(), n, "rows");
    for lane in ["app", "driver", "doorbell", "device"] {
        assert!(
            dom.contains(&format!("data-lane=\"{lane}\"")),
            "lane {lane}"
        );
    }
    for lane in rnic_trace::LANES {
        assert!(dom.contains(&format!("<th>{lane}</th>")), "header {lane}");
    }
    // Rows with what the decoders said, their fields and their bytes.
    assert!(dom.contains("<summary>MMIO BAR0+0x000 ID -&gt; 0x43494e52 (\"RNIC\")</summary>"));
    assert!(dom.contains("CREATE_QP done: OK qpn"));
    assert!(dom.contains("<td>opcode</td><td>CREATE_CQ</td>"));
    assert!(dom.contains("<pre class=\"raw\">0000  "), "a hex dump");
    assert!(
        dom.contains(&format!("{n} events: app 2, driver")),
        "summary"
    );
}
