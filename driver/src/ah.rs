//! Address handles: where UD sends go (`struct ibv_ah`).
//!
//! As in libibverbs providers for RoCE NICs, an address handle is the
//! driver's own: its checked address vector is copied into the datagram
//! segment of every UD send WQE, so creating one issues no command. A
//! destination MAC of zero is resolved by the device (ARP or neighbour
//! discovery), as for an RC path.

use alloc::format;
use alloc::sync::Arc;

use rnic_queues::Hal;

use crate::error::{Error, Result};
use crate::pd::{Pd, PdInner};
use rnic_verbs::check_ah;
use rnic_verbs::AhAttr;
use rnic_verbs::Gid;
use rnic_verbs::UdDest;
use rnic_verbs::{wc_flags, WorkCompletion};

/// Bytes of the GRH that heads a UD receive buffer.
pub const GRH_LEN: usize = 40;

/// An address handle (`ibv_create_ah`): a checked path to a UD peer. It
/// keeps its PD alive.
pub struct Ah<H: Hal> {
    pd: Arc<PdInner<H>>,
    attr: AhAttr,
}

impl<H: Hal> Pd<H> {
    /// Creates an address handle for `attr` (`ibv_create_ah`). RoCE needs a
    /// GRH (`is_global`), a source GID index that is in use, and a
    /// destination of the same IP version as the source (IPv4-mapped or
    /// IPv6); `port_num` 0 means port 1.
    pub fn create_ah(&self, attr: &AhAttr) -> Result<Ah<H>> {
        let ctx = &self.inner.ctx;
        let port = if attr.port_num == 0 { 1 } else { attr.port_num };
        check_ah(attr, port, &ctx.ports)?;
        let sgid = ctx.query_gid(port, attr.sgid_index.into())?;
        if sgid == [0; 16] {
            return Err(Error::invalid(format!(
                "ah_attr.sgid_index {} names an unused GID of port {port}",
                attr.sgid_index
            )));
        }
        if is_v4_mapped(&sgid) != is_v4_mapped(&attr.dgid) {
            return Err(Error::invalid(
                "ah_attr.dgid and the source GID must both be IPv4 (IPv4-mapped) or both IPv6",
            ));
        }
        Ok(Ah {
            pd: Arc::clone(&self.inner),
            attr: AhAttr {
                port_num: port,
                ..*attr
            },
        })
    }

    /// An address handle back to the sender of a UD message
    /// (`ibv_create_ah_from_wc`): `wc` its receive completion (with the
    /// GRH flag) and `grh` the first [`GRH_LEN`] bytes of its buffer,
    /// which hold the IPv6 header, or 20 zero bytes and the IPv4 header.
    /// The path goes to the GRH's source from the local GID it was sent
    /// to, with the received traffic class (and flow label) and a hop
    /// limit of 255, as libibverbs builds it.
    pub fn create_ah_from_wc(&self, wc: &WorkCompletion, grh: &[u8]) -> Result<Ah<H>> {
        if wc.flags & wc_flags::GRH == 0 {
            return Err(Error::invalid(
                "the completion has no GRH (IBV_WC_GRH): not a UD receive over RoCE",
            ));
        }
        let grh: &[u8; GRH_LEN] = grh
            .get(..GRH_LEN)
            .and_then(|g| g.try_into().ok())
            .ok_or_else(|| Error::invalid(format!("a GRH is {GRH_LEN} bytes")))?;
        let (sgid, dgid, traffic_class, flow_label) = parse_grh(grh)?;
        let ctx = &self.inner.ctx;
        let port = ctx.port(1)?;
        let index = (0..port.gid_tbl_len)
            .find(|&i| ctx.query_gid(1, i).is_ok_and(|g| g == dgid))
            .ok_or_else(|| Error::invalid("the GRH's destination is none of port 1's GIDs"))?;
        self.create_ah(&AhAttr {
            dgid: sgid,
            flow_label,
            sgid_index: index as u8,
            hop_limit: 0xff,
            traffic_class,
            sl: 0,
            dmac: [0; 6],
            port_num: 1,
            is_global: true,
        })
    }
}

impl<H: Hal> Ah<H> {
    /// The address handle's attributes (its port filled in).
    pub fn attr(&self) -> AhAttr {
        self.attr
    }

    /// A UD destination through this handle: QP `remote_qpn` (24 bits),
    /// whose Q_Key is `remote_qkey` (a Q_Key with the high bit set stands
    /// for the sending QP's own).
    pub fn dest(&self, remote_qpn: u32, remote_qkey: u32) -> UdDest {
        UdDest::new(self.pd.pdn, self.attr, remote_qpn & 0xff_ffff, remote_qkey)
    }
}

fn is_v4_mapped(gid: &Gid) -> bool {
    gid[..10] == [0; 10] && gid[10..12] == [0xff, 0xff]
}

fn v4_mapped(ip: &[u8]) -> Gid {
    let mut gid = [0; 16];
    gid[10..12].copy_from_slice(&[0xff, 0xff]);
    gid[12..].copy_from_slice(ip);
    gid
}

/// Source GID, destination GID, traffic class and flow label of a RoCEv2
/// GRH area.
fn parse_grh(grh: &[u8; GRH_LEN]) -> Result<(Gid, Gid, u8, u32)> {
    let v4 = &grh[20..];
    if grh[..20] == [0; 20] && v4[0] >> 4 == 4 {
        return Ok((v4_mapped(&v4[12..16]), v4_mapped(&v4[16..20]), v4[1], 0));
    }
    if grh[0] >> 4 == 6 {
        let word = u32::from_be_bytes([grh[0], grh[1], grh[2], grh[3]]);
        let mut sgid = [0; 16];
        let mut dgid = [0; 16];
        sgid.copy_from_slice(&grh[8..24]);
        dgid.copy_from_slice(&grh[24..40]);
        return Ok((sgid, dgid, (word >> 20) as u8, word & 0xf_ffff));
    }
    Err(Error::invalid(
        "the GRH holds neither an IPv6 header nor an IPv4 one",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grh_of_ipv4_and_ipv6() {
        let mut g = [0u8; GRH_LEN];
        g[20..40].copy_from_slice(&[
            0x45, 0x02, 0, 60, 0, 1, 0x40, 0, 64, 17, 0, 0, 192, 0, 2, 1, 192, 0, 2, 2,
        ]);
        let (s, d, tc, fl) = parse_grh(&g).unwrap();
        assert_eq!(s, v4_mapped(&[192, 0, 2, 1]));
        assert_eq!(d, v4_mapped(&[192, 0, 2, 2]));
        assert_eq!((tc, fl), (2, 0));
        let mut g = [0u8; GRH_LEN];
        g[..4].copy_from_slice(&[0x61, 0x23, 0x45, 0x67]);
        g[8] = 0xfe;
        g[9] = 0x80;
        g[23] = 1;
        g[24] = 0xfe;
        g[25] = 0x80;
        g[39] = 2;
        let (s, d, tc, fl) = parse_grh(&g).unwrap();
        assert_eq!((s[0], s[15], d[0], d[15]), (0xfe, 1, 0xfe, 2));
        assert_eq!((tc, fl), (0x12, 0x34567));
        assert!(parse_grh(&[0; GRH_LEN]).is_err());
    }
}
