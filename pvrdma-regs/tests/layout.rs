//! Every size and offset of this crate, checked against the C compiler's
//! reading of VMware's headers (`headers/`): a C program prints
//! `sizeof` and `offsetof` of each struct and field, and each must equal
//! its Rust counterpart's.

use std::collections::HashMap;
use std::mem::{offset_of, size_of};
use std::path::Path;
use std::process::Command;

use rnic_pvrdma_regs::cmd::*;
use rnic_pvrdma_regs::cqe::{Cqe, Cqne, Eqe};
use rnic_pvrdma_regs::dsr::{DeviceCaps, Dsr, GosInfo, RingPageInfo};
use rnic_pvrdma_regs::ring::{Ring, RingState};
use rnic_pvrdma_regs::wqe::*;
use rnic_pvrdma_regs::{bar1, uar};

/// One expected value: a C expression and the Rust value it must equal.
struct Probe {
    c: String,
    rust: usize,
}

/// `sizeof` of C type `c` against Rust type `R`, and `offsetof` of each
/// (C field, Rust offset) pair.
macro_rules! layout {
    ($probes:ident, $c:literal, $r:ty { $($cf:literal => $rf:tt),* $(,)? }) => {
        $probes.push(Probe { c: format!("sizeof({})", $c), rust: size_of::<$r>() });
        $($probes.push(Probe {
            c: format!("offsetof({}, {})", $c, $cf),
            rust: offset_of!($r, $rf),
        });)*
    };
}

/// A C constant against its Rust value.
macro_rules! constant {
    ($probes:ident, $($c:literal => $r:expr),+ $(,)?) => {
        $($probes.push(Probe { c: $c.to_string(), rust: $r as usize });)+
    };
}

fn probes() -> Vec<Probe> {
    let mut p = Vec::new();
    layout!(p, "struct pvrdma_gos_info", GosInfo { "pad" => pad });
    layout!(p, "struct pvrdma_device_caps", DeviceCaps {
        "fw_ver" => fw_ver, "atomic_arg_sizes" => atomic_arg_sizes,
        "ex_comp_mask" => ex_comp_mask, "vendor_id" => vendor_id, "max_qp" => max_qp,
        "max_sge_rd" => max_sge_rd, "max_qp_init_rd_atom" => max_qp_init_rd_atom,
        "max_mw" => max_mw, "max_ah" => max_ah, "max_srq_sge" => max_srq_sge,
        "max_uar" => max_uar, "gid_tbl_len" => gid_tbl_len, "max_pkeys" => max_pkeys,
        "local_ca_ack_delay" => local_ca_ack_delay, "phys_port_cnt" => phys_port_cnt,
        "mode" => mode, "atomic_ops" => atomic_ops, "bmme_flags" => bmme_flags,
        "gid_types" => gid_types, "max_fast_reg_page_list_len" => max_fast_reg_page_list_len,
    });
    layout!(p, "struct pvrdma_ring_page_info", RingPageInfo {
        "num_pages" => num_pages, "pdir_dma" => pdir_dma,
    });
    layout!(p, "struct pvrdma_device_shared_region", Dsr {
        "driver_version" => driver_version, "gos_info" => gos_info,
        "cmd_slot_dma" => cmd_slot_dma, "resp_slot_dma" => resp_slot_dma,
        "async_ring_pages" => async_ring_pages, "cq_ring_pages" => cq_ring_pages,
        "uar_pfn" => uar_pfn, "uar_pfn64" => uar_pfn, "caps" => caps,
    });
    layout!(p, "struct pvrdma_eqe", Eqe { "type" => kind, "info" => info });
    layout!(p, "struct pvrdma_cqne", Cqne { "info" => info });
    layout!(p, "struct pvrdma_cmd_hdr", CmdHdr {
        "response" => response, "cmd" => cmd, "reserved" => reserved,
    });
    layout!(p, "struct pvrdma_cmd_resp_hdr", RespHdr {
        "response" => response, "ack" => ack, "err" => err, "reserved" => reserved,
    });
    layout!(p, "struct pvrdma_port_attr", PortAttr {
        "state" => state, "max_mtu" => max_mtu, "active_mtu" => active_mtu,
        "gid_tbl_len" => gid_tbl_len, "port_cap_flags" => port_cap_flags,
        "max_msg_sz" => max_msg_sz, "qkey_viol_cntr" => qkey_viol_cntr,
        "pkey_tbl_len" => pkey_tbl_len, "lid" => lid, "sm_lid" => sm_lid, "lmc" => lmc,
        "subnet_timeout" => subnet_timeout, "init_type_reply" => init_type_reply,
        "active_width" => active_width, "active_speed" => active_speed,
        "phys_state" => phys_state, "reserved" => reserved,
    });
    layout!(p, "struct pvrdma_global_route", GlobalRoute {
        "dgid" => dgid, "flow_label" => flow_label, "sgid_index" => sgid_index,
        "hop_limit" => hop_limit, "traffic_class" => traffic_class,
    });
    layout!(p, "struct pvrdma_ah_attr", AhAttr {
        "grh" => grh, "dlid" => dlid, "vlan_id" => vlan_id, "sl" => sl,
        "src_path_bits" => src_path_bits, "static_rate" => static_rate, "ah_flags" => ah_flags,
        "port_num" => port_num, "dmac" => dmac, "reserved" => reserved,
    });
    layout!(p, "struct pvrdma_qp_cap", QpCap {
        "max_send_wr" => max_send_wr, "max_inline_data" => max_inline_data,
    });
    layout!(p, "struct pvrdma_srq_attr", SrqAttr {
        "max_wr" => max_wr, "max_sge" => max_sge, "srq_limit" => srq_limit,
    });
    layout!(p, "struct pvrdma_qp_attr", QpAttr {
        "qp_state" => qp_state, "cur_qp_state" => cur_qp_state, "path_mtu" => path_mtu,
        "path_mig_state" => path_mig_state, "qkey" => qkey, "rq_psn" => rq_psn,
        "sq_psn" => sq_psn, "dest_qp_num" => dest_qp_num, "qp_access_flags" => qp_access_flags,
        "pkey_index" => pkey_index, "alt_pkey_index" => alt_pkey_index,
        "en_sqd_async_notify" => en_sqd_async_notify, "sq_draining" => sq_draining,
        "max_rd_atomic" => max_rd_atomic, "max_dest_rd_atomic" => max_dest_rd_atomic,
        "min_rnr_timer" => min_rnr_timer, "port_num" => port_num, "timeout" => timeout,
        "retry_cnt" => retry_cnt, "rnr_retry" => rnr_retry, "alt_port_num" => alt_port_num,
        "alt_timeout" => alt_timeout, "reserved" => reserved, "cap" => cap,
        "ah_attr" => ah_attr, "alt_ah_attr" => alt_ah_attr,
    });
    layout!(p, "struct pvrdma_cmd_query_port", QueryPort { "port_num" => port_num });
    layout!(p, "struct pvrdma_cmd_query_port_resp", QueryPortResp { "attrs" => attrs });
    layout!(p, "struct pvrdma_cmd_query_pkey", QueryPkey {
        "port_num" => port_num, "index" => index,
    });
    layout!(p, "struct pvrdma_cmd_query_pkey_resp", QueryPkeyResp { "pkey" => pkey });
    layout!(p, "struct pvrdma_cmd_create_uc", CreateUc { "pfn" => pfn, "pfn64" => pfn });
    for (c, f) in [
        ("struct pvrdma_cmd_create_uc_resp", "ctx_handle"),
        ("struct pvrdma_cmd_create_pd_resp", "pd_handle"),
        ("struct pvrdma_cmd_create_srq_resp", "srqn"),
    ] {
        p.push(Probe {
            c: format!("sizeof({c})"),
            rust: size_of::<HandleResp>(),
        });
        p.push(Probe {
            c: format!("offsetof({c}, {f})"),
            rust: offset_of!(HandleResp, handle),
        });
    }
    for (c, f) in [
        ("struct pvrdma_cmd_destroy_uc", "ctx_handle"),
        ("struct pvrdma_cmd_create_pd", "ctx_handle"),
        ("struct pvrdma_cmd_destroy_pd", "pd_handle"),
        ("struct pvrdma_cmd_destroy_mr", "mr_handle"),
        ("struct pvrdma_cmd_destroy_cq", "cq_handle"),
        ("struct pvrdma_cmd_destroy_qp", "qp_handle"),
        ("struct pvrdma_cmd_query_srq", "srq_handle"),
        ("struct pvrdma_cmd_destroy_srq", "srq_handle"),
    ] {
        p.push(Probe {
            c: format!("sizeof({c})"),
            rust: size_of::<HandleCmd>(),
        });
        p.push(Probe {
            c: format!("offsetof({c}, {f})"),
            rust: offset_of!(HandleCmd, handle),
        });
    }
    layout!(p, "struct pvrdma_cmd_create_mr", CreateMr {
        "start" => start, "length" => length, "pdir_dma" => pdir_dma, "pd_handle" => pd_handle,
        "access_flags" => access_flags, "flags" => flags, "nchunks" => nchunks,
    });
    layout!(p, "struct pvrdma_cmd_create_mr_resp", CreateMrResp {
        "mr_handle" => mr_handle, "lkey" => lkey, "rkey" => rkey,
    });
    layout!(p, "struct pvrdma_cmd_create_cq", CreateCq {
        "pdir_dma" => pdir_dma, "ctx_handle" => ctx_handle, "cqe" => cqe, "nchunks" => nchunks,
    });
    layout!(p, "struct pvrdma_cmd_create_cq_resp", CreateCqResp {
        "cq_handle" => cq_handle, "cqe" => cqe,
    });
    layout!(p, "struct pvrdma_cmd_resize_cq", ResizeCq { "cq_handle" => cq_handle, "cqe" => cqe });
    layout!(p, "struct pvrdma_cmd_resize_cq_resp", ResizeCqResp { "cqe" => cqe });
    layout!(p, "struct pvrdma_cmd_create_srq", CreateSrq {
        "pdir_dma" => pdir_dma, "pd_handle" => pd_handle, "nchunks" => nchunks,
        "attrs" => attrs, "srq_type" => srq_type,
    });
    layout!(p, "struct pvrdma_cmd_modify_srq", ModifySrq {
        "srq_handle" => srq_handle, "attr_mask" => attr_mask, "attrs" => attrs,
    });
    layout!(p, "struct pvrdma_cmd_query_srq_resp", QuerySrqResp { "attrs" => attrs });
    layout!(p, "struct pvrdma_cmd_create_qp", CreateQp {
        "pdir_dma" => pdir_dma, "pd_handle" => pd_handle, "send_cq_handle" => send_cq_handle,
        "recv_cq_handle" => recv_cq_handle, "srq_handle" => srq_handle,
        "max_send_wr" => max_send_wr, "max_recv_wr" => max_recv_wr,
        "max_send_sge" => max_send_sge, "max_recv_sge" => max_recv_sge,
        "max_inline_data" => max_inline_data, "lkey" => lkey, "access_flags" => access_flags,
        "total_chunks" => total_chunks, "send_chunks" => send_chunks,
        "max_atomic_arg" => max_atomic_arg, "sq_sig_all" => sq_sig_all, "qp_type" => qp_type,
        "is_srq" => is_srq, "reserved" => reserved,
    });
    layout!(p, "struct pvrdma_cmd_create_qp_resp", CreateQpResp {
        "qpn" => qpn, "max_send_wr" => max_send_wr, "max_inline_data" => max_inline_data,
    });
    layout!(p, "struct pvrdma_cmd_create_qp_resp_v2", CreateQpRespV2 {
        "qpn" => qpn, "qp_handle" => qp_handle, "max_send_wr" => max_send_wr,
        "max_inline_data" => max_inline_data,
    });
    layout!(p, "struct pvrdma_cmd_modify_qp", ModifyQp {
        "qp_handle" => qp_handle, "attr_mask" => attr_mask, "attrs" => attrs,
    });
    layout!(p, "struct pvrdma_cmd_query_qp", QueryQp {
        "qp_handle" => qp_handle, "attr_mask" => attr_mask,
    });
    layout!(p, "struct pvrdma_cmd_query_qp_resp", QueryQpResp { "attrs" => attrs });
    layout!(p, "struct pvrdma_cmd_destroy_qp_resp", DestroyQpResp {
        "events_reported" => events_reported,
    });
    layout!(p, "struct pvrdma_cmd_create_bind", CreateBind {
        "mtu" => mtu, "vlan" => vlan, "index" => index, "new_gid" => new_gid,
        "gid_type" => gid_type,
    });
    layout!(p, "struct pvrdma_cmd_destroy_bind", DestroyBind {
        "index" => index, "dest_gid" => dest_gid,
    });
    layout!(p, "struct pvrdma_sge", Sge { "addr" => addr, "length" => length, "lkey" => lkey });
    layout!(p, "struct pvrdma_rq_wqe_hdr", RqWqeHdr {
        "wr_id" => wr_id, "num_sge" => num_sge, "total_len" => total_len,
    });
    layout!(p, "struct pvrdma_av", Av {
        "port_pd" => port_pd, "sl_tclass_flowlabel" => sl_tclass_flowlabel, "dgid" => dgid,
        "src_path_bits" => src_path_bits, "gid_index" => gid_index, "stat_rate" => stat_rate,
        "hop_limit" => hop_limit, "dmac" => dmac, "reserved" => reserved,
    });
    layout!(p, "struct pvrdma_cqe", Cqe {
        "wr_id" => wr_id, "qp" => qp, "opcode" => opcode, "status" => status,
        "byte_len" => byte_len, "imm_data" => imm_data, "src_qp" => src_qp,
        "wc_flags" => wc_flags, "vendor_err" => vendor_err, "pkey_index" => pkey_index,
        "slid" => slid, "sl" => sl, "dlid_path_bits" => dlid_path_bits, "port_num" => port_num,
        "smac" => smac, "network_hdr_type" => network_hdr_type, "reserved2" => reserved2,
    });
    layout!(p, "struct pvrdma_ring", Ring { "prod_tail" => prod_tail, "cons_head" => cons_head });
    layout!(p, "struct pvrdma_ring_state", RingState { "tx" => tx, "rx" => rx });
    // The send WQE: the header up to its union, then each union member.
    let w = "struct pvrdma_sq_wqe_hdr";
    layout!(p, "struct pvrdma_sq_wqe_hdr", SqWqeCtrl {
        "wr_id" => wr_id, "num_sge" => num_sge, "total_len" => total_len, "opcode" => opcode,
        "send_flags" => send_flags, "ex" => ex, "reserved" => reserved,
    });
    // sizeof of the whole header is SQ_WQE_HDR_SIZE, not SqWqeCtrl's.
    p.retain(|x| x.c != format!("sizeof({w})"));
    constant!(p, "sizeof(struct pvrdma_sq_wqe_hdr)" => SQ_WQE_HDR_SIZE,
        "offsetof(struct pvrdma_sq_wqe_hdr, wr)" => SQ_WQE_WR_OFFSET);
    for (member, size, fields) in [
        (
            "rdma",
            size_of::<RdmaWr>(),
            vec![
                ("remote_addr", offset_of!(RdmaWr, remote_addr)),
                ("rkey", offset_of!(RdmaWr, rkey)),
            ],
        ),
        (
            "atomic",
            size_of::<AtomicWr>(),
            vec![
                ("remote_addr", offset_of!(AtomicWr, remote_addr)),
                ("compare_add", offset_of!(AtomicWr, compare_add)),
                ("swap", offset_of!(AtomicWr, swap)),
                ("rkey", offset_of!(AtomicWr, rkey)),
            ],
        ),
        (
            "fast_reg",
            size_of::<FastRegWr>(),
            vec![
                ("iova_start", offset_of!(FastRegWr, iova_start)),
                ("pl_pdir_dma", offset_of!(FastRegWr, pl_pdir_dma)),
                ("page_shift", offset_of!(FastRegWr, page_shift)),
                ("page_list_len", offset_of!(FastRegWr, page_list_len)),
                ("length", offset_of!(FastRegWr, length)),
                ("access_flags", offset_of!(FastRegWr, access_flags)),
                ("rkey", offset_of!(FastRegWr, rkey)),
            ],
        ),
        (
            "ud",
            size_of::<UdWr>(),
            vec![
                ("remote_qpn", offset_of!(UdWr, remote_qpn)),
                ("remote_qkey", offset_of!(UdWr, remote_qkey)),
                ("av", offset_of!(UdWr, av)),
            ],
        ),
    ] {
        let m = format!("((struct pvrdma_sq_wqe_hdr *)0)->wr.{member}");
        p.push(Probe {
            c: format!("sizeof({m})"),
            rust: size,
        });
        for (f, off) in fields {
            p.push(Probe {
                c: format!("offsetof({w}, wr.{member}.{f}) - offsetof({w}, wr)"),
                rust: off,
            });
        }
    }
    constant!(p,
        "sizeof(union pvrdma_cmd_req)" => CMD_REQ_SIZE,
        "sizeof(union pvrdma_cmd_resp)" => CMD_RESP_SIZE,
        "PVRDMA_CMD_FIRST_RESP" => RESP_BIT,
        "PVRDMA_CMD_QUERY_PORT" => CmdOpcode::QueryPort.raw(),
        "PVRDMA_CMD_CREATE_MR" => CmdOpcode::CreateMr.raw(),
        "PVRDMA_CMD_CREATE_QP" => CmdOpcode::CreateQp.raw(),
        "PVRDMA_CMD_CREATE_UC" => CmdOpcode::CreateUc.raw(),
        "PVRDMA_CMD_CREATE_BIND" => CmdOpcode::CreateBind.raw(),
        "PVRDMA_CMD_DESTROY_SRQ" => CmdOpcode::DestroySrq.raw(),
        "PVRDMA_CMD_MAX" => CmdOpcode::DestroySrq.raw() + 1,
        "PVRDMA_CMD_CREATE_QP_RESP" => CmdOpcode::CreateQp.ack(),
        "PVRDMA_REG_VERSION" => bar1::VERSION,
        "PVRDMA_REG_DSRLOW" => bar1::DSRLOW,
        "PVRDMA_REG_DSRHIGH" => bar1::DSRHIGH,
        "PVRDMA_REG_CTL" => bar1::CTL,
        "PVRDMA_REG_REQUEST" => bar1::REQUEST,
        "PVRDMA_REG_ERR" => bar1::ERR,
        "PVRDMA_REG_ICR" => bar1::ICR,
        "PVRDMA_REG_IMR" => bar1::IMR,
        "PVRDMA_REG_MACL" => bar1::MACL,
        "PVRDMA_REG_MACH" => bar1::MACH,
        "PVRDMA_ROCEV1_VERSION" => bar1::VERSION_ROCEV1,
        "PVRDMA_QPHANDLE_VERSION" => bar1::VERSION_QPHANDLE,
        "PVRDMA_DEVICE_CTL_RESET" => bar1::Ctl::Reset.raw(),
        "PVRDMA_INTR_VECTOR_CQ" => bar1::IntrVector::Cq.raw(),
        "PVRDMA_MAX_INTERRUPTS" => bar1::MAX_INTERRUPTS,
        "PVRDMA_PDIR_SHIFT" => rnic_pvrdma_regs::dsr::PDIR_SHIFT,
        "PVRDMA_PTABLE_SHIFT" => rnic_pvrdma_regs::dsr::PTABLE_SHIFT,
        "PVRDMA_PAGE_DIR_MAX_PAGES" => rnic_pvrdma_regs::dsr::PDIR_MAX_PAGES,
        "PVRDMA_UAR_HANDLE_MASK" => uar::HANDLE_MASK,
        "PVRDMA_UAR_QP_OFFSET" => uar::QP_DB,
        "PVRDMA_UAR_QP_SEND" => uar::QP_SEND,
        "PVRDMA_UAR_QP_RECV" => uar::QP_RECV,
        "PVRDMA_UAR_CQ_OFFSET" => uar::CQ_DB,
        "PVRDMA_UAR_CQ_ARM_SOL" => uar::CQ_ARM_SOL,
        "PVRDMA_UAR_CQ_ARM" => uar::CQ_ARM,
        "PVRDMA_UAR_CQ_POLL" => uar::CQ_POLL,
        "PVRDMA_UAR_SRQ_OFFSET" => uar::SRQ_DB,
        "PVRDMA_UAR_SRQ_RECV" => uar::SRQ_RECV,
        "PVRDMA_WR_BIND_MW" => WrOpcode::BindMw.raw(),
        "PVRDMA_WR_SEND_WITH_INV" => WrOpcode::SendWithInv.raw(),
        "PVRDMA_SEND_INLINE" => send_flags::INLINE,
        "PVRDMA_QPT_UD" => QpType::Ud.raw(),
        "PVRDMA_QPS_ERR" => QpState::Err.raw(),
        "PVRDMA_QP_DEST_QPN" => qp_attr_mask::DEST_QPN,
        "PVRDMA_QP_MIN_RNR_TIMER" => qp_attr_mask::MIN_RNR_TIMER,
        "PVRDMA_ACCESS_MW_BIND" => access::MW_BIND,
        "PVRDMA_MR_FLAG_FRMR" => MR_FLAG_FRMR,
        "PVRDMA_WC_RECV_RDMA_WITH_IMM" => rnic_pvrdma_regs::cqe::WcOpcode::RecvRdmaWithImm.raw(),
        "PVRDMA_WC_GENERAL_ERR" => rnic_pvrdma_regs::cqe::WcStatus::GeneralErr.raw(),
        "PVRDMA_WC_WITH_NETWORK_HDR_TYPE" => rnic_pvrdma_regs::cqe::wc_flags::WITH_NETWORK_HDR_TYPE,
        "PVRDMA_EVENT_GID_CHANGE" => rnic_pvrdma_regs::cqe::EventType::GidChange.raw(),
        "PVRDMA_GID_TYPE_FLAG_ROCE_V2" => rnic_pvrdma_regs::dsr::GID_TYPE_ROCE_V2,
        "PVRDMA_DEVICE_MODE_ROCE" => rnic_pvrdma_regs::dsr::DeviceMode::Roce.raw(),
    );
    p
}

/// Compiles and runs a C program printing each probe's value, one per line (each taken as 32 bits: `1 << 31` is a negative `int` in C).
fn c_values(probes: &[Probe]) -> Vec<usize> {
    let headers = Path::new(env!("CARGO_MANIFEST_DIR")).join("headers");
    let dir = std::env::temp_dir().join(format!("rnic-pvrdma-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut src = String::from(
        "#include <stdint.h>\n#include <stddef.h>\n#include <stdio.h>\n\
         #define BIT(n) (1UL << (n))\n\
         typedef struct { int counter; } atomic_t;\n\
         #define atomic_read(v) ((v)->counter)\n\
         #define atomic_set(v, i) ((v)->counter = (i))\n\
         #include \"standard-headers/drivers/infiniband/hw/vmw_pvrdma/pvrdma_dev_api.h\"\n\
         #include \"standard-headers/rdma/vmw_pvrdma-abi.h\"\n\
         #include \"pvrdma_ring.h\"\n\
         int main(void) {\n",
    );
    for p in probes {
        src += &format!(
            "    printf(\"%lu\\n\", (unsigned long)(uint32_t)({}));\n",
            p.c
        );
    }
    src += "    return 0;\n}\n";
    let (c, exe) = (dir.join("probe.c"), dir.join("probe"));
    std::fs::write(&c, src).unwrap();
    let out = Command::new("gcc")
        .args(["-std=gnu11", "-Wall", "-Werror", "-I"])
        .arg(&headers)
        .arg(&c)
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("gcc");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(&exe).output().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect()
}

#[test]
fn layouts_match_vmwares_headers() {
    let probes = probes();
    let c = c_values(&probes);
    assert_eq!(c.len(), probes.len(), "one value per probe");
    let wrong: Vec<String> = probes
        .iter()
        .zip(&c)
        .filter(|(p, c)| p.rust != **c)
        .map(|(p, c)| format!("{}: C {c}, Rust {}", p.c, p.rust))
        .collect();
    assert!(
        wrong.is_empty(),
        "layouts differ from the C headers:\n{}",
        wrong.join("\n")
    );
    let distinct: HashMap<&str, usize> = probes.iter().map(|p| (p.c.as_str(), p.rust)).collect();
    eprintln!("{} sizes, offsets and constants match", distinct.len());
    assert!(distinct.len() > 350, "{} probes", distinct.len());
}
