//! The QP state machine: which transitions the InfiniBand spec allows
//! and which attributes each requires and allows.

use crate::enums::{qp_attr, QpState, QpType};

/// Attribute masks a QP state transition requires and allows, as the
/// InfiniBand spec (and the kernel's `ib_modify_qp_is_ok`) define them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transition {
    /// Bits of [`qp_attr`] that must be set.
    pub required: u32,
    /// Further bits that may be set.
    pub optional: u32,
}

/// The masks for moving a QP of type `ty` from `cur` to `next`, or `None`
/// if the transition is not allowed. Any state may move to `Reset` or `Err`;
/// `Sqe` is entered by the device only (a UC or UD send error), and RC QPs
/// never are in it.
pub const fn qp_transition(ty: QpType, cur: QpState, next: QpState) -> Option<Transition> {
    use qp_attr::*;
    use QpState::*;
    const fn t(required: u32, optional: u32) -> Option<Transition> {
        Some(Transition {
            required: required | STATE,
            optional,
        })
    }
    match (cur, next) {
        (_, Reset) | (_, Err) => t(0, 0),
        (Reset, Init) => match ty {
            QpType::Rc | QpType::Uc => t(PKEY_INDEX | PORT | ACCESS_FLAGS, 0),
            QpType::Ud => t(PKEY_INDEX | PORT | QKEY, 0),
            // The port is the GSI QP's own (the kernel's table allows none).
            QpType::Gsi => t(PKEY_INDEX | QKEY, PORT),
        },
        (Init, Init) => match ty {
            QpType::Rc | QpType::Uc => t(0, PKEY_INDEX | PORT | ACCESS_FLAGS),
            QpType::Ud => t(0, PKEY_INDEX | PORT | QKEY),
            QpType::Gsi => t(0, PKEY_INDEX | QKEY),
        },
        (Init, Rtr) => match ty {
            QpType::Rc => t(
                AV | PATH_MTU | DEST_QPN | RQ_PSN | MAX_DEST_RD_ATOMIC | MIN_RNR_TIMER,
                ALT_PATH | ACCESS_FLAGS | PKEY_INDEX,
            ),
            QpType::Uc => t(
                AV | PATH_MTU | DEST_QPN | RQ_PSN,
                ALT_PATH | ACCESS_FLAGS | PKEY_INDEX,
            ),
            QpType::Ud | QpType::Gsi => t(0, PKEY_INDEX | QKEY),
        },
        (Rtr, Rts) => match ty {
            QpType::Rc => t(
                SQ_PSN | TIMEOUT | RETRY_CNT | RNR_RETRY | MAX_QP_RD_ATOMIC,
                CUR_STATE | ALT_PATH | ACCESS_FLAGS | MIN_RNR_TIMER | PATH_MIG_STATE,
            ),
            QpType::Uc => t(SQ_PSN, CUR_STATE | ALT_PATH | ACCESS_FLAGS | PATH_MIG_STATE),
            QpType::Ud | QpType::Gsi => t(SQ_PSN, CUR_STATE | QKEY),
        },
        (Rts, Rts) => match ty {
            QpType::Rc => t(
                0,
                CUR_STATE | ACCESS_FLAGS | ALT_PATH | PATH_MIG_STATE | MIN_RNR_TIMER,
            ),
            QpType::Uc => t(0, CUR_STATE | ACCESS_FLAGS | ALT_PATH | PATH_MIG_STATE),
            QpType::Ud | QpType::Gsi => t(0, CUR_STATE | QKEY),
        },
        (Rts, Sqd) => t(0, EN_SQD_ASYNC_NOTIFY),
        (Sqd, Rts) => match ty {
            QpType::Rc => t(
                0,
                CUR_STATE | ALT_PATH | ACCESS_FLAGS | MIN_RNR_TIMER | PATH_MIG_STATE,
            ),
            QpType::Uc => t(0, CUR_STATE | ALT_PATH | ACCESS_FLAGS | PATH_MIG_STATE),
            QpType::Ud | QpType::Gsi => t(0, CUR_STATE | QKEY),
        },
        (Sqd, Sqd) => match ty {
            QpType::Rc => t(
                0,
                PORT | AV
                    | TIMEOUT
                    | RETRY_CNT
                    | RNR_RETRY
                    | MAX_QP_RD_ATOMIC
                    | MAX_DEST_RD_ATOMIC
                    | ALT_PATH
                    | ACCESS_FLAGS
                    | PKEY_INDEX
                    | MIN_RNR_TIMER
                    | PATH_MIG_STATE,
            ),
            QpType::Uc => t(
                0,
                AV | ALT_PATH | ACCESS_FLAGS | PKEY_INDEX | PATH_MIG_STATE,
            ),
            QpType::Ud | QpType::Gsi => t(0, PKEY_INDEX | QKEY),
        },
        (Sqe, Rts) => match ty {
            QpType::Rc => None,
            QpType::Uc => t(0, CUR_STATE | ACCESS_FLAGS),
            QpType::Ud | QpType::Gsi => t(0, CUR_STATE | QKEY),
        },
        _ => None,
    }
}

#[cfg(test)]
mod transition_tests {
    use super::*;

    #[test]
    fn rc_path_masks() {
        let t = qp_transition(QpType::Rc, QpState::Reset, QpState::Init).unwrap();
        assert_eq!(
            t.required,
            qp_attr::STATE | qp_attr::PKEY_INDEX | qp_attr::PORT | qp_attr::ACCESS_FLAGS
        );
        let t = qp_transition(QpType::Rc, QpState::Init, QpState::Rtr).unwrap();
        assert_ne!(t.required & qp_attr::DEST_QPN, 0);
        assert!(qp_transition(QpType::Rc, QpState::Reset, QpState::Rts).is_none());
        assert!(qp_transition(QpType::Rc, QpState::Init, QpState::Rts).is_none());
        assert!(qp_transition(QpType::Rc, QpState::Err, QpState::Rts).is_none());
        assert_eq!(
            qp_transition(QpType::Rc, QpState::Rts, QpState::Err)
                .unwrap()
                .required,
            qp_attr::STATE
        );
        assert_eq!(
            qp_transition(QpType::Rc, QpState::Err, QpState::Reset)
                .unwrap()
                .required,
            qp_attr::STATE
        );
    }

    #[test]
    fn sqd_and_sqe_masks() {
        use qp_attr::*;
        use QpState::*;
        let opt = |ty, a, b| qp_transition(ty, a, b).map(|t| (t.required, t.optional));
        for ty in [QpType::Rc, QpType::Uc, QpType::Ud] {
            assert_eq!(opt(ty, Rts, Sqd), Some((STATE, EN_SQD_ASYNC_NOTIFY)));
            assert!(qp_transition(ty, Rtr, Sqd).is_none());
            assert!(qp_transition(ty, Sqd, Rtr).is_none());
            assert!(qp_transition(ty, Rts, Sqe).is_none(), "the device's only");
        }
        assert_eq!(opt(QpType::Ud, Sqd, Sqd), Some((STATE, PKEY_INDEX | QKEY)));
        assert_eq!(opt(QpType::Ud, Sqe, Rts), Some((STATE, CUR_STATE | QKEY)));
        assert_eq!(
            opt(QpType::Uc, Sqe, Rts),
            Some((STATE, CUR_STATE | ACCESS_FLAGS))
        );
        assert!(qp_transition(QpType::Rc, Sqe, Rts).is_none());
        // The GSI QP is UD but for its port, which it has already.
        assert_eq!(
            opt(QpType::Gsi, Reset, Init),
            Some((STATE | PKEY_INDEX | QKEY, PORT))
        );
        assert_eq!(opt(QpType::Gsi, Init, Rtr), opt(QpType::Ud, Init, Rtr));
        assert_eq!(opt(QpType::Gsi, Rtr, Rts), opt(QpType::Ud, Rtr, Rts));
        let rc = opt(QpType::Rc, Sqd, Sqd).unwrap().1;
        assert!(rc & AV != 0 && rc & TIMEOUT != 0 && rc & QKEY == 0);
    }
}
