//! Shared receive queue attributes (`struct ibv_srq_attr`).

/// SRQ attributes (`struct ibv_srq_attr`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SrqAttr {
    /// Receive requests the SRQ holds.
    pub max_wr: u32,
    /// Scatter/gather entries per receive request.
    pub max_sge: u32,
    /// The limit: when fewer requests remain posted, the device reports
    /// the SRQ-limit event once and the limit goes back to 0 (disarmed).
    /// Ignored when an SRQ is created, as by `ibv_create_srq`.
    pub srq_limit: u32,
}

/// `enum ibv_srq_attr_mask`: what a modify of an SRQ changes.
pub mod srq_mask {
    /// `IBV_SRQ_MAX_WR`: resize the queue.
    pub const MAX_WR: u32 = 1 << 0;
    /// `IBV_SRQ_LIMIT`: set the limit, arming its event.
    pub const LIMIT: u32 = 1 << 1;
}
