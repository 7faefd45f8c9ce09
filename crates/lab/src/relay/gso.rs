//! Virtio-net headers and TCP segmentation-offload super-packets: recognising an IPv4 TCP
//! super-packet read from a TUN device, and cutting it into smaller ones (down to single wire
//! packets) when the link model delivers or drops its wire packets differently.
//!
//! Pieces keep the kernel's conventions for TSO output: IP ids increase by one per segment, the
//! sequence number advances by the bytes before the piece, FIN and PSH stay on the last piece,
//! CWR on the first, and the TCP checksum field holds the pseudo-header sum with
//! `NEEDS_CSUM` set so the receiving stack treats the payload checksum as offloaded.

/// Size of `struct virtio_net_hdr`, the default TUN vnet header.
pub(crate) const VNET_HDR_LEN: usize = 10;
pub(crate) const F_NEEDS_CSUM: u8 = 1;
pub(crate) const GSO_NONE: u8 = 0;
pub(crate) const GSO_TCPV4: u8 = 1;
pub(crate) const GSO_ECN: u8 = 0x80;

/// `struct virtio_net_hdr`, little-endian as TUN uses it on little-endian hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct VnetHdr {
    pub(crate) flags: u8,
    pub(crate) gso_type: u8,
    pub(crate) hdr_len: u16,
    pub(crate) gso_size: u16,
    pub(crate) csum_start: u16,
    pub(crate) csum_offset: u16,
}

impl VnetHdr {
    pub(crate) fn parse(b: &[u8]) -> Option<Self> {
        let b = b.get(..VNET_HDR_LEN)?;
        let u = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        Some(Self {
            flags: b[0],
            gso_type: b[1],
            hdr_len: u(2),
            gso_size: u(4),
            csum_start: u(6),
            csum_offset: u(8),
        })
    }

    pub(crate) fn write(&self, out: &mut [u8]) {
        out[0] = self.flags;
        out[1] = self.gso_type;
        out[2..4].copy_from_slice(&self.hdr_len.to_le_bytes());
        out[4..6].copy_from_slice(&self.gso_size.to_le_bytes());
        out[6..8].copy_from_slice(&self.csum_start.to_le_bytes());
        out[8..10].copy_from_slice(&self.csum_offset.to_le_bytes());
    }
}

/// Shape of an IPv4 TCP super-packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TcpSuper {
    ip_hdr_len: usize,
    /// IP plus TCP header bytes, repeated in every wire packet.
    pub(crate) hdr_len: usize,
    pub(crate) mss: usize,
    payload: usize,
    ecn: bool,
}

impl TcpSuper {
    /// Recognises a super-packet worth splitting; anything else travels as one unit.
    pub(crate) fn parse(vnet: &VnetHdr, ip: &[u8]) -> Option<Self> {
        if vnet.gso_type & !GSO_ECN != GSO_TCPV4 || vnet.gso_size == 0 {
            return None;
        }
        if ip.len() < 20 || ip[0] >> 4 != 4 || ip[9] != 6 {
            return None;
        }
        let ip_hdr_len = usize::from(ip[0] & 0x0f) * 4;
        let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
        if ip_hdr_len < 20 || total != ip.len() || ip.len() < ip_hdr_len + 20 {
            return None;
        }
        let tcp_hdr_len = usize::from(ip[ip_hdr_len + 12] >> 4) * 4;
        let hdr_len = ip_hdr_len + tcp_hdr_len;
        if tcp_hdr_len < 20 || ip.len() < hdr_len {
            return None;
        }
        let payload = ip.len() - hdr_len;
        let mss = usize::from(vnet.gso_size);
        if payload <= mss {
            return None;
        }
        Some(Self {
            ip_hdr_len,
            hdr_len,
            mss,
            payload,
            ecn: vnet.gso_type & GSO_ECN != 0,
        })
    }

    pub(crate) fn segments(&self) -> usize {
        self.payload.div_ceil(self.mss)
    }

    /// IP bytes of wire packet `i`.
    pub(crate) fn wire_len(&self, i: usize) -> usize {
        self.hdr_len + self.piece_payload(i, 1)
    }

    fn piece_payload(&self, first: usize, count: usize) -> usize {
        let start = first * self.mss;
        let end = ((first + count) * self.mss).min(self.payload);
        end - start
    }

    /// Bytes [`TcpSuper::write_piece`] writes (vnet header included).
    pub(crate) fn piece_len(&self, first: usize, count: usize) -> usize {
        VNET_HDR_LEN + self.hdr_len + self.piece_payload(first, count)
    }

    /// Writes wire packets `first .. first + count` of the super-packet `ip` as one (super-)packet
    /// with its vnet header into `out`; returns the bytes written.
    pub(crate) fn write_piece(
        &self,
        ip: &[u8],
        first: usize,
        count: usize,
        out: &mut [u8],
    ) -> usize {
        let payload = self.piece_payload(first, count);
        let total = self.hdr_len + payload;
        let last = first + count == self.segments();
        let vnet = VnetHdr {
            flags: F_NEEDS_CSUM,
            gso_type: if payload > self.mss {
                GSO_TCPV4 | if self.ecn { GSO_ECN } else { 0 }
            } else {
                GSO_NONE
            },
            hdr_len: self.hdr_len as u16,
            gso_size: if payload > self.mss {
                self.mss as u16
            } else {
                0
            },
            csum_start: self.ip_hdr_len as u16,
            csum_offset: 16,
        };
        vnet.write(out);
        let pkt = &mut out[VNET_HDR_LEN..VNET_HDR_LEN + total];
        pkt[..self.hdr_len].copy_from_slice(&ip[..self.hdr_len]);
        let from = self.hdr_len + first * self.mss;
        pkt[self.hdr_len..].copy_from_slice(&ip[from..from + payload]);

        let ihl = self.ip_hdr_len;
        pkt[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        let id = u16::from_be_bytes([ip[4], ip[5]]).wrapping_add(first as u16);
        pkt[4..6].copy_from_slice(&id.to_be_bytes());
        pkt[10..12].fill(0);
        let ip_csum = !fold(sum16(&pkt[..ihl]));
        pkt[10..12].copy_from_slice(&ip_csum.to_be_bytes());

        let tcp = ihl;
        let seq = u32::from_be_bytes([ip[tcp + 4], ip[tcp + 5], ip[tcp + 6], ip[tcp + 7]])
            .wrapping_add((first * self.mss) as u32);
        pkt[tcp + 4..tcp + 8].copy_from_slice(&seq.to_be_bytes());
        const FIN: u8 = 0x01;
        const PSH: u8 = 0x08;
        const CWR: u8 = 0x80;
        if !last {
            pkt[tcp + 13] &= !(FIN | PSH);
        }
        if first != 0 {
            pkt[tcp + 13] &= !CWR;
        }
        // Pseudo-header sum (source, destination, protocol, TCP length), as the kernel leaves
        // it for a checksum the device is to finish.
        let tcp_len = (total - ihl) as u32;
        let pseudo = sum16(&pkt[12..20]) + 6 + tcp_len;
        pkt[tcp + 16..tcp + 18].copy_from_slice(&fold(pseudo).to_be_bytes());
        VNET_HDR_LEN + total
    }
}

fn sum16(b: &[u8]) -> u32 {
    b.chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum()
}

fn fold(mut s: u32) -> u16 {
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A TSO super-packet as the kernel hands it over: 10.77.0.1 -> 10.77.0.2, 32-byte TCP
    /// header (timestamps), payload bytes numbered.
    fn super_packet(payload: usize, mss: u16, flags: u8) -> (VnetHdr, Vec<u8>) {
        let mut ip = vec![0u8; 52 + payload];
        let total = ip.len() as u16;
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&total.to_be_bytes());
        ip[4..6].copy_from_slice(&0xfff0u16.to_be_bytes());
        ip[6] = 0x40;
        ip[8] = 64;
        ip[9] = 6;
        ip[12..16].copy_from_slice(&[10, 77, 0, 1]);
        ip[16..20].copy_from_slice(&[10, 77, 0, 2]);
        ip[20..22].copy_from_slice(&5201u16.to_be_bytes());
        ip[24..28].copy_from_slice(&0xffff_ff00u32.to_be_bytes());
        ip[32] = 8 << 4;
        ip[33] = flags;
        for (i, b) in ip[52..].iter_mut().enumerate() {
            *b = (i % 253) as u8;
        }
        let vnet = VnetHdr {
            flags: F_NEEDS_CSUM,
            gso_type: GSO_TCPV4,
            hdr_len: 52,
            gso_size: mss,
            csum_start: 20,
            csum_offset: 16,
        };
        (vnet, ip)
    }

    #[test]
    fn recognises_and_counts_segments() {
        let (v, ip) = super_packet(10_000, 1448, 0x18);
        let s = TcpSuper::parse(&v, &ip).unwrap_or_else(|| panic!("not recognised"));
        assert_eq!(s.segments(), 7);
        assert_eq!(s.wire_len(0), 1500);
        assert_eq!(s.wire_len(6), 52 + 10_000 - 6 * 1448);
        let plain = VnetHdr::default();
        assert_eq!(TcpSuper::parse(&plain, &ip), None);
    }

    #[test]
    fn pieces_reassemble_to_the_original_stream() {
        let (v, ip) = super_packet(10_000, 1448, 0x80 | 0x18 | 0x01);
        let s = TcpSuper::parse(&v, &ip).unwrap_or_else(|| panic!("not recognised"));
        let mut stream = Vec::new();
        for (first, count) in [(0usize, 1usize), (1, 3), (4, 3)] {
            let mut out = vec![0u8; s.piece_len(first, count)];
            let n = s.write_piece(&ip, first, count, &mut out);
            assert_eq!(n, out.len());
            let vh = VnetHdr::parse(&out).unwrap_or_default();
            let p = &out[VNET_HDR_LEN..];
            assert_eq!(usize::from(u16::from_be_bytes([p[2], p[3]])), p.len());
            assert_eq!(fold(sum16(&p[..20])), 0xffff, "ip checksum");
            assert_eq!(
                u16::from_be_bytes([p[4], p[5]]),
                0xfff0u16.wrapping_add(first as u16)
            );
            let seq = u32::from_be_bytes([p[24], p[25], p[26], p[27]]);
            assert_eq!(seq, 0xffff_ff00u32.wrapping_add((first * 1448) as u32));
            let flags = p[33];
            assert_eq!(flags & 0x80 != 0, first == 0, "cwr only first");
            assert_eq!(flags & 0x09 != 0, first + count == 7, "fin/psh only last");
            if count == 1 {
                assert_eq!(vh.gso_type, GSO_NONE);
            } else {
                assert_eq!((vh.gso_type, vh.gso_size), (GSO_TCPV4, 1448));
            }
            // Finishing the checksum as a device would (sum from csum_start, with the
            // pseudo-header sum already in the field) yields a segment that verifies.
            let mut tcp = p[20..].to_vec();
            let done = !fold(sum16(&tcp));
            tcp[16..18].copy_from_slice(&done.to_be_bytes());
            let pseudo = sum16(&p[12..20]) + 6 + tcp.len() as u32;
            assert_eq!(fold(pseudo + sum16(&tcp)), 0xffff, "tcp checksum");
            stream.extend_from_slice(&p[52..]);
        }
        assert_eq!(stream, ip[52..]);
    }
}
