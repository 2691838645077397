//! Static rates (`enum ibv_rate`) and their conversions:
//! `ibv_rate_to_mult`, `mult_to_ibv_rate`, `ibv_rate_to_mbps`,
//! `mbps_to_ibv_rate`, with libibverbs' tables.

use std::ffi::c_int;

/// `IBV_RATE_MAX`: what the conversions to a rate give for a value with
/// no rate.
const RATE_MAX: c_int = 0;

/// (rate, multiple of 2.5 Gb/s) for the rates that are such a multiple.
const MULT: [(c_int, c_int); 15] = [
    (2, 1),
    (5, 2),
    (3, 4),
    (6, 8),
    (4, 12),
    (7, 16),
    (8, 24),
    (9, 32),
    (10, 48),
    (19, 11),
    (20, 20),
    (21, 160),
    (22, 240),
    (23, 320),
    (24, 480),
];

/// (rate, Mb/s) for every rate.
const MBPS: [(c_int, c_int); 23] = [
    (2, 2500),
    (5, 5000),
    (3, 10000),
    (6, 20000),
    (4, 30000),
    (7, 40000),
    (8, 60000),
    (9, 80000),
    (10, 120000),
    (11, 14062),
    (12, 56250),
    (13, 112500),
    (14, 168750),
    (15, 25781),
    (16, 103125),
    (17, 206250),
    (18, 309375),
    (19, 28125),
    (20, 53125),
    (21, 425000),
    (22, 637500),
    (23, 850000),
    (24, 1275000),
];

/// `ibv_rate_to_mult`: the rate as a multiple of 2.5 Gb/s, or -1.
#[no_mangle]
pub extern "C" fn ibv_rate_to_mult(rate: c_int) -> c_int {
    MULT.iter().find(|m| m.0 == rate).map_or(-1, |m| m.1)
}

/// `mult_to_ibv_rate`: the rate of a multiple of 2.5 Gb/s, or
/// `IBV_RATE_MAX`.
#[no_mangle]
pub extern "C" fn mult_to_ibv_rate(mult: c_int) -> c_int {
    MULT.iter().find(|m| m.1 == mult).map_or(RATE_MAX, |m| m.0)
}

/// `ibv_rate_to_mbps`: the rate in Mb/s, or -1.
#[no_mangle]
pub extern "C" fn ibv_rate_to_mbps(rate: c_int) -> c_int {
    MBPS.iter().find(|m| m.0 == rate).map_or(-1, |m| m.1)
}

/// `mbps_to_ibv_rate`: the rate of exactly `mbps` Mb/s, or
/// `IBV_RATE_MAX`.
#[no_mangle]
pub extern "C" fn mbps_to_ibv_rate(mbps: c_int) -> c_int {
    MBPS.iter().find(|m| m.1 == mbps).map_or(RATE_MAX, |m| m.0)
}
