//! Asynchronous events (`struct ibv_async_event`).

use rnic_queues::wire_enum;

wire_enum! {
    /// Asynchronous event types (`enum ibv_event_type`, libibverbs'
    /// values).
    EventType: u8 {
        /// A CQ overflowed or failed.
        CqErr = 0,
        /// A QP failed and is in the error state.
        QpFatal = 1,
        /// A QP's peer reported an invalid request.
        QpReqErr = 2,
        /// A QP's peer reported an access violation.
        QpAccessErr = 3,
        /// A QP in RTR received its first message.
        CommEst = 4,
        /// A QP in SQD drained its send queue.
        SqDrained = 5,
        /// A QP migrated to its alternate path.
        PathMig = 6,
        /// A QP's path migration failed.
        PathMigErr = 7,
        /// The device failed.
        DeviceFatal = 8,
        /// A port became active.
        PortActive = 9,
        /// A port went down.
        PortErr = 10,
        /// A port's LID changed.
        LidChange = 11,
        /// A port's P_Key table changed.
        PkeyChange = 12,
        /// A port's subnet manager changed.
        SmChange = 13,
        /// An SRQ failed.
        SrqErr = 14,
        /// An SRQ fell below its limit.
        SrqLimitReached = 15,
        /// A QP on an SRQ in the error state has no receive left.
        QpLastWqeReached = 16,
        /// The subnet manager asked for re-registration.
        ClientReregister = 17,
        /// A port's GID table changed.
        GidChange = 18,
    }
}

/// What kind of object an event names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventElement {
    /// A CQ, by number.
    Cq,
    /// A QP, by number.
    Qp,
    /// An SRQ, by number.
    Srq,
    /// A port, by number.
    Port,
    /// The device itself.
    Device,
}

impl EventType {
    /// The kind of object an event of this type names.
    pub const fn element(self) -> EventElement {
        use EventType::*;
        match self {
            CqErr => EventElement::Cq,
            QpFatal | QpReqErr | QpAccessErr | CommEst | SqDrained | PathMig | PathMigErr
            | QpLastWqeReached => EventElement::Qp,
            SrqErr | SrqLimitReached => EventElement::Srq,
            PortActive | PortErr | LidChange | PkeyChange | SmChange | ClientReregister
            | GidChange => EventElement::Port,
            DeviceFatal => EventElement::Device,
        }
    }
}

/// An asynchronous event: its type and the number of what it names (a
/// CQ's, QP's or SRQ's number, or a port; 0 for the device).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AsyncEvent {
    /// What happened.
    pub event_type: EventType,
    /// The object's number.
    pub obj: u32,
}
