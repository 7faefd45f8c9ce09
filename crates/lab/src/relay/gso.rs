//! Virtio-net headers and segmentation-offload super-packets: recognising an IPv4 TCP (TSO) or
//! UDP (USO, `UDP_SEGMENT`) super-packet read from a TUN device, and cutting it into smaller
//! ones (down to single wire packets) when the link model delivers or drops its wire packets
//! differently.
//!
//! Pieces keep the kernel's conventions for segmentation output: IP ids increase by one per
//! segment; for TCP the sequence number advances by the bytes before the piece, FIN and PSH stay
//! on the last piece, CWR on the first; for UDP the length covers the piece. The TCP or UDP
//! checksum field holds the pseudo-header sum with `NEEDS_CSUM` set, so the receiving stack
//! treats the payload checksum as offloaded. A UDP piece of several datagrams reaches a socket
//! with `UDP_GRO` on as one coalesced read, as from a NIC doing GRO; other sockets get it
//! segmented by the kernel.

/// Size of `struct virtio_net_hdr`, the default TUN vnet header.
pub(crate) const VNET_HDR_LEN: usize = 10;
pub(crate) const F_NEEDS_CSUM: u8 = 1;
pub(crate) const GSO_NONE: u8 = 0;
pub(crate) const GSO_TCPV4: u8 = 1;
pub(crate) const GSO_UDP_L4: u8 = 5;
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

/// What a super-packet carries, and so how each piece's transport header is fixed up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transport {
    Tcp { ecn: bool },
    Udp,
}

impl Transport {
    fn protocol(self) -> u8 {
        match self {
            Transport::Tcp { .. } => 6,
            Transport::Udp => 17,
        }
    }

    /// Offset of the checksum within the transport header.
    fn csum_offset(self) -> usize {
        match self {
            Transport::Tcp { .. } => 16,
            Transport::Udp => 6,
        }
    }

    fn gso_type(self) -> u8 {
        match self {
            Transport::Tcp { ecn } => GSO_TCPV4 | if ecn { GSO_ECN } else { 0 },
            Transport::Udp => GSO_UDP_L4,
        }
    }
}

/// Shape of an IPv4 TCP or UDP super-packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Super {
    ip_hdr_len: usize,
    /// IP plus TCP or UDP header bytes, repeated in every wire packet.
    pub(crate) hdr_len: usize,
    /// Payload bytes per wire packet (TCP's MSS, UDP's datagram size), the last one excepted.
    pub(crate) mss: usize,
    payload: usize,
    transport: Transport,
}

impl Super {
    /// Recognises a super-packet worth splitting; anything else travels as one unit.
    pub(crate) fn parse(vnet: &VnetHdr, ip: &[u8]) -> Option<Self> {
        if vnet.gso_size == 0 || ip.len() < 20 || ip[0] >> 4 != 4 {
            return None;
        }
        let transport = match (vnet.gso_type & !GSO_ECN, ip[9]) {
            (GSO_TCPV4, 6) => Transport::Tcp {
                ecn: vnet.gso_type & GSO_ECN != 0,
            },
            (GSO_UDP_L4, 17) => Transport::Udp,
            _ => return None,
        };
        let ip_hdr_len = usize::from(ip[0] & 0x0f) * 4;
        let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
        if ip_hdr_len < 20 || total != ip.len() || ip.len() < ip_hdr_len + 8 {
            return None;
        }
        let l4_hdr_len = match transport {
            Transport::Tcp { .. } => {
                let n = usize::from(ip.get(ip_hdr_len + 12)? >> 4) * 4;
                if n < 20 {
                    return None;
                }
                n
            }
            Transport::Udp => 8,
        };
        let hdr_len = ip_hdr_len + l4_hdr_len;
        if ip.len() < hdr_len {
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
            transport,
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

    /// Bytes [`Super::write_piece`] writes (vnet header included).
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
                self.transport.gso_type()
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
            csum_offset: self.transport.csum_offset() as u16,
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

        let l4 = ihl;
        let l4_len = total - ihl;
        match self.transport {
            Transport::Tcp { .. } => {
                let seq = u32::from_be_bytes([ip[l4 + 4], ip[l4 + 5], ip[l4 + 6], ip[l4 + 7]])
                    .wrapping_add((first * self.mss) as u32);
                pkt[l4 + 4..l4 + 8].copy_from_slice(&seq.to_be_bytes());
                const FIN: u8 = 0x01;
                const PSH: u8 = 0x08;
                const CWR: u8 = 0x80;
                if !last {
                    pkt[l4 + 13] &= !(FIN | PSH);
                }
                if first != 0 {
                    pkt[l4 + 13] &= !CWR;
                }
            }
            // The length covers the piece: the receiving stack trims a datagram to it, and
            // segments a coalesced piece at `gso_size`.
            Transport::Udp => pkt[l4 + 4..l4 + 6].copy_from_slice(&(l4_len as u16).to_be_bytes()),
        }
        // Pseudo-header sum (source, destination, protocol, transport length), as the kernel
        // leaves it for a checksum the device is to finish.
        let pseudo = sum16(&pkt[12..20]) + u32::from(self.transport.protocol()) + l4_len as u32;
        let at = l4 + self.transport.csum_offset();
        pkt[at..at + 2].copy_from_slice(&fold(pseudo).to_be_bytes());
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

    /// An IPv4 packet 10.77.0.1 -> 10.77.0.2 of `hdr_len` header bytes (IP and `protocol`'s)
    /// and `payload` numbered payload bytes; the transport header is left to the caller.
    fn ipv4(protocol: u8, id: u16, hdr_len: usize, payload: usize) -> Vec<u8> {
        let mut ip = vec![0u8; hdr_len + payload];
        let total = ip.len() as u16;
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&total.to_be_bytes());
        ip[4..6].copy_from_slice(&id.to_be_bytes());
        ip[6] = 0x40;
        ip[8] = 64;
        ip[9] = protocol;
        ip[12..16].copy_from_slice(&[10, 77, 0, 1]);
        ip[16..20].copy_from_slice(&[10, 77, 0, 2]);
        for (i, b) in ip[hdr_len..].iter_mut().enumerate() {
            *b = (i % 253) as u8;
        }
        ip
    }

    /// Checks a written piece's IP header (length, checksum, id `base_id + first`) and that
    /// its transport checksum, finished as a device would (sum from `csum_start`, with the
    /// pseudo-header sum already in the field), verifies. Returns the vnet header and packet.
    fn check_piece(out: &[u8], base_id: u16, first: usize) -> (VnetHdr, &[u8]) {
        let vh = VnetHdr::parse(out).unwrap_or_default();
        let p = &out[VNET_HDR_LEN..];
        assert_eq!(usize::from(u16::from_be_bytes([p[2], p[3]])), p.len());
        assert_eq!(fold(sum16(&p[..20])), 0xffff, "ip checksum");
        assert_eq!(
            u16::from_be_bytes([p[4], p[5]]),
            base_id.wrapping_add(first as u16)
        );
        assert_eq!(vh.csum_start, 20);
        let mut l4 = p[20..].to_vec();
        let at = usize::from(vh.csum_offset);
        let done = !fold(sum16(&l4));
        l4[at..at + 2].copy_from_slice(&done.to_be_bytes());
        let pseudo = sum16(&p[12..20]) + u32::from(p[9]) + l4.len() as u32;
        assert_eq!(fold(pseudo + sum16(&l4)), 0xffff, "transport checksum");
        (vh, p)
    }

    /// A TSO super-packet as the kernel hands it over: 10.77.0.1 -> 10.77.0.2, 32-byte TCP
    /// header (timestamps), payload bytes numbered.
    fn super_packet(payload: usize, mss: u16, flags: u8) -> (VnetHdr, Vec<u8>) {
        let mut ip = ipv4(6, 0xfff0, 52, payload);
        ip[20..22].copy_from_slice(&5201u16.to_be_bytes());
        ip[24..28].copy_from_slice(&0xffff_ff00u32.to_be_bytes());
        ip[32] = 8 << 4;
        ip[33] = flags;
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
        let s = Super::parse(&v, &ip).unwrap_or_else(|| panic!("not recognised"));
        assert_eq!(s.segments(), 7);
        assert_eq!(s.wire_len(0), 1500);
        assert_eq!(s.wire_len(6), 52 + 10_000 - 6 * 1448);
        let plain = VnetHdr::default();
        assert_eq!(Super::parse(&plain, &ip), None);
    }

    #[test]
    fn pieces_reassemble_to_the_original_stream() {
        let (v, ip) = super_packet(10_000, 1448, 0x80 | 0x18 | 0x01);
        let s = Super::parse(&v, &ip).unwrap_or_else(|| panic!("not recognised"));
        let mut stream = Vec::new();
        for (first, count) in [(0usize, 1usize), (1, 3), (4, 3)] {
            let mut out = vec![0u8; s.piece_len(first, count)];
            let n = s.write_piece(&ip, first, count, &mut out);
            assert_eq!(n, out.len());
            let (vh, p) = check_piece(&out, 0xfff0, first);
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
            assert_eq!(vh.csum_offset, 16);
            stream.extend_from_slice(&p[52..]);
        }
        assert_eq!(stream, ip[52..]);
    }

    /// A `UDP_SEGMENT` train as the kernel hands it over: 10.77.0.1 -> 10.77.0.2, datagrams of
    /// `size` bytes (the last may be shorter), payload bytes numbered.
    fn udp_train(payload: usize, size: u16) -> (VnetHdr, Vec<u8>) {
        let mut ip = ipv4(17, 0x0100, 28, payload);
        ip[20..22].copy_from_slice(&8443u16.to_be_bytes());
        ip[22..24].copy_from_slice(&40000u16.to_be_bytes());
        ip[24..26].copy_from_slice(&((8 + payload) as u16).to_be_bytes());
        let vnet = VnetHdr {
            flags: F_NEEDS_CSUM,
            gso_type: GSO_UDP_L4,
            hdr_len: 28,
            gso_size: size,
            csum_start: 20,
            csum_offset: 6,
        };
        (vnet, ip)
    }

    #[test]
    fn udp_pieces_are_runs_of_whole_datagrams() {
        let (v, ip) = udp_train(6 * 1200 + 500, 1200);
        let s = Super::parse(&v, &ip).unwrap_or_else(|| panic!("not recognised"));
        assert_eq!(s.segments(), 7);
        assert_eq!(s.wire_len(0), 1228);
        assert_eq!(s.wire_len(6), 528);
        // A TCP super-packet's GSO type on a UDP packet, or the reverse, is not a train.
        let tcp_typed = VnetHdr {
            gso_type: GSO_TCPV4,
            ..v
        };
        assert_eq!(Super::parse(&tcp_typed, &ip), None);
        let mut datagrams = Vec::new();
        for (first, count) in [(0usize, 1usize), (1, 3), (4, 3)] {
            let mut out = vec![0u8; s.piece_len(first, count)];
            let n = s.write_piece(&ip, first, count, &mut out);
            assert_eq!(n, out.len());
            let (vh, p) = check_piece(&out, 0x0100, first);
            let udp_len = usize::from(u16::from_be_bytes([p[24], p[25]]));
            assert_eq!(udp_len, p.len() - 20, "udp length covers the piece");
            if count == 1 {
                assert_eq!(vh.gso_type, GSO_NONE);
            } else {
                assert_eq!((vh.gso_type, vh.gso_size), (GSO_UDP_L4, 1200));
            }
            assert_eq!(vh.csum_offset, 6);
            datagrams.extend(p[28..].chunks(1200).map(<[u8]>::to_vec));
        }
        let original: Vec<Vec<u8>> = ip[28..].chunks(1200).map(<[u8]>::to_vec).collect();
        assert_eq!(datagrams, original);
    }
}
