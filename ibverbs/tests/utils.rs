//! The drop-in libibverbs.so.1 under Debian's unmodified rdma-core
//! programs (scripts/setup.sh installs ibverbs-utils and
//! libibverbs-dev): its exported symbols and versions, its structures
//! against rdma-core 44's header, and `ibv_devices` listing the
//! configured devices.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use rnic_ibverbs::abi::IbvDevice;

/// `target/ibverbs-test/ibverbs`, holding libibverbs.so.1, built once per
/// run by ibverbs/build.sh (in a target directory of its own: the one this
/// test runs from is locked by the cargo that runs it).
fn lib_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let target = root.join("target/ibverbs-test");
        let st = Command::new("bash")
            .arg(root.join("ibverbs/build.sh"))
            .env("CARGO_TARGET_DIR", &target)
            .status()
            .expect("bash");
        assert!(st.success(), "ibverbs/build.sh failed");
        target.join("ibverbs")
    })
}

/// `program` with the rnic libibverbs and `RNIC_DEVICES` (unset if None).
fn run(program: &str, args: &[&str], devices: Option<&str>) -> Output {
    let mut c = Command::new(program);
    c.args(args).env("LD_LIBRARY_PATH", lib_dir());
    match devices {
        Some(d) => c.env("RNIC_DEVICES", d),
        None => c.env_remove("RNIC_DEVICES"),
    };
    c.env_remove("RNIC_DEVICES_FILE");
    c.output()
        .unwrap_or_else(|e| panic!("{program}: {e} (scripts/setup.sh installs it)"))
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn exports_exactly_the_mapped_symbols_with_their_versions() {
    let so = lib_dir().join("libibverbs.so.1");
    let o = Command::new("objdump").arg("-T").arg(&so).output().unwrap();
    let table = String::from_utf8_lossy(&o.stdout);
    let map = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("libibverbs.map"))
        .unwrap();
    let mapped: Vec<&str> = map
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("ibv_") && l.ends_with(';'))
        .map(|l| l.trim_end_matches(';'))
        .collect();
    assert!(!mapped.is_empty());
    // Defined functions: `DF .text`; their version is the next-to-last
    // column.
    let defined: Vec<(&str, &str)> = table
        .lines()
        .filter(|l| l.contains(" DF .text"))
        .filter_map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            Some((cols[cols.len() - 2], *cols.last()?))
        })
        .collect();
    for s in &mapped {
        assert!(
            defined.contains(&("IBVERBS_1.1", s)),
            "{s}@@IBVERBS_1.1 missing:\n{table}"
        );
    }
    assert_eq!(
        defined.len(),
        mapped.len(),
        "nothing else exported:\n{table}"
    );
    let d = Command::new("readelf").arg("-d").arg(&so).output().unwrap();
    assert!(String::from_utf8_lossy(&d.stdout).contains("[libibverbs.so.1]"));
}

#[test]
fn struct_ibv_device_is_laid_out_as_the_header() {
    let probe = r#"
#include <stddef.h>
#include <stdio.h>
#include <infiniband/verbs.h>
#define F(field) printf("%s %zu\n", #field, offsetof(struct ibv_device, field))
int main(void) {
    printf("size %zu\n", sizeof(struct ibv_device));
    F(_ops); F(node_type); F(transport_type); F(name); F(dev_name); F(dev_path); F(ibdev_path);
    return 0;
}
"#;
    let dir = std::env::temp_dir().join(format!("rnic-ibv-probe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("probe.c"), probe).unwrap();
    let st = Command::new("gcc")
        .arg(dir.join("probe.c"))
        .arg("-o")
        .arg(dir.join("probe"))
        .status()
        .expect("gcc");
    assert!(st.success(), "the probe needs libibverbs-dev's headers");
    let out = Command::new(dir.join("probe")).output().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let header: Vec<(String, usize)> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let (k, v) = l.split_once(' ').unwrap();
            (k.to_owned(), v.parse().unwrap())
        })
        .collect();
    let ours = [
        ("size", size_of::<IbvDevice>()),
        ("_ops", std::mem::offset_of!(IbvDevice, ops)),
        ("node_type", std::mem::offset_of!(IbvDevice, node_type)),
        (
            "transport_type",
            std::mem::offset_of!(IbvDevice, transport_type),
        ),
        ("name", std::mem::offset_of!(IbvDevice, name)),
        ("dev_name", std::mem::offset_of!(IbvDevice, dev_name)),
        ("dev_path", std::mem::offset_of!(IbvDevice, dev_path)),
        ("ibdev_path", std::mem::offset_of!(IbvDevice, ibdev_path)),
    ];
    for ((k, v), (name, want)) in ours.iter().zip(&header) {
        assert_eq!((k, v), (&name.as_str(), want), "struct ibv_device.{k}");
    }
    assert_eq!(ours.len(), header.len());
}

#[test]
fn ibv_devices_lists_the_configured_devices() {
    let o = run(
        "ibv_devices",
        &[],
        Some("name=rnic0,mac=02:11:22:33:44:55;name=second"),
    );
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    let rows: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|w| w.len() == 2 && w[1].bytes().all(|b| b.is_ascii_hexdigit()))
        .collect();
    assert_eq!(
        rows,
        [
            vec!["rnic0", "001122fffe334455"],
            vec!["second", "000000fffe000002"]
        ],
        "{out}"
    );
    // Without a configuration: one device on a loopback wire.
    let (out, _) = text(&run("ibv_devices", &[], None));
    assert!(
        out.contains("rnic0") && out.contains("000000fffe000001"),
        "{out}"
    );
}

#[test]
fn devices_from_a_file() {
    let path = std::env::temp_dir().join(format!("rnic-devices-{}", std::process::id()));
    std::fs::write(
        &path,
        "# two NICs\nname=left,mac=02:00:00:00:00:0a  # the first\n\nname=right,wire=loopback\n",
    )
    .unwrap();
    let o = Command::new("ibv_devices")
        .env("LD_LIBRARY_PATH", lib_dir())
        .env_remove("RNIC_DEVICES")
        .env("RNIC_DEVICES_FILE", &path)
        .output()
        .unwrap();
    std::fs::remove_file(&path).unwrap();
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        out.contains("left") && out.contains("000000fffe00000a"),
        "{out}"
    );
    assert!(
        out.contains("right") && out.contains("000000fffe000002"),
        "{out}"
    );
}

#[test]
fn a_bad_configuration_fails_as_libibverbs_fails() {
    let o = run("ibv_devices", &[], Some("mac=02:00"));
    let (out, err) = text(&o);
    assert!(!o.status.success(), "{out}");
    // The reason, then ibv_devices' own report of errno EINVAL.
    assert!(err.contains("rnic libibverbs: mac `02:00`"), "{err}");
    assert!(err.contains("Invalid argument"), "{err}");
}
