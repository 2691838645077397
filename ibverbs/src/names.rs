//! The texts libibverbs gives for its enumerations: `ibv_wc_status_str`,
//! `ibv_event_type_str`, `ibv_node_type_str`, `ibv_port_state_str`.
//! Programs print them, so they are rdma-core's words exactly.

use std::ffi::{c_char, c_int, CStr};

/// Entry `index` of `table`, or "unknown" (what libibverbs says for a
/// value outside its enumeration).
fn text(table: &[&'static CStr], index: c_int) -> *const c_char {
    usize::try_from(index)
        .ok()
        .and_then(|i| table.get(i))
        .map_or(c"unknown".as_ptr(), |s| s.as_ptr())
}

/// `ibv_wc_status_str`: the text of a completion status.
#[no_mangle]
pub extern "C" fn ibv_wc_status_str(status: c_int) -> *const c_char {
    const TEXT: [&CStr; 24] = [
        c"success",
        c"local length error",
        c"local QP operation error",
        c"local EE context operation error",
        c"local protection error",
        c"Work Request Flushed Error",
        c"memory management operation error",
        c"bad response error",
        c"local access error",
        c"remote invalid request error",
        c"remote access error",
        c"remote operation error",
        c"transport retry counter exceeded",
        c"RNR retry counter exceeded",
        c"local RDD violation error",
        c"remote invalid RD request",
        c"aborted error",
        c"invalid EE context number",
        c"invalid EE context state",
        c"fatal error",
        c"response timeout error",
        c"general error",
        c"TM error",
        c"TM software rendezvous",
    ];
    text(&TEXT, status)
}

/// `ibv_event_type_str`: the text of an asynchronous event type.
#[no_mangle]
pub extern "C" fn ibv_event_type_str(event: c_int) -> *const c_char {
    const TEXT: [&CStr; 20] = [
        c"CQ error",
        c"local work queue catastrophic error",
        c"invalid request local work queue error",
        c"local access violation work queue error",
        c"communication established",
        c"send queue drained",
        c"path migrated",
        c"path migration request error",
        c"local catastrophic error",
        c"port active",
        c"port error",
        c"LID change",
        c"P_Key change",
        c"SM change",
        c"SRQ catastrophic error",
        c"SRQ limit reached",
        c"last WQE reached",
        c"client reregistration",
        c"GID table change",
        c"WQ fatal",
    ];
    text(&TEXT, event)
}

/// `ibv_node_type_str`: the text of a node type (`IBV_NODE_CA` is 1; 0
/// and -1 are unknown).
#[no_mangle]
pub extern "C" fn ibv_node_type_str(node_type: c_int) -> *const c_char {
    const TEXT: [&CStr; 8] = [
        c"unknown",
        c"InfiniBand channel adapter",
        c"InfiniBand switch",
        c"InfiniBand router",
        c"iWARP NIC",
        c"usNIC",
        c"usNIC UDP",
        c"unspecified",
    ];
    text(&TEXT, node_type)
}

/// `ibv_port_state_str`: the text of a port state.
#[no_mangle]
pub extern "C" fn ibv_port_state_str(port_state: c_int) -> *const c_char {
    const TEXT: [&CStr; 6] = [
        c"no state change (NOP)",
        c"down",
        c"init",
        c"armed",
        c"active",
        c"active defer",
    ];
    text(&TEXT, port_state)
}
