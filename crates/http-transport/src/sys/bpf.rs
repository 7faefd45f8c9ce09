//! The kernel half of TCP resume: a `sock_ops` BPF program that raises the initial congestion
//! window (`TCP_BPF_IW`) of a connection this server accepts from a peer it holds a saved
//! path for, and the hash map user space fills with those paths.
//!
//! The program is assembled here from a few dozen instructions instead of being compiled from
//! C: no clang, no object file, no loader library. The `bpf(2)` calls are the three the
//! feature needs (create a map, load a program, link it to a cgroup) plus map updates.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// One saved path as the program reads it (`struct` layout shared with the bytecode below).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct MapValue {
    /// Segments the next connections may start with; each takes half of what is left.
    pub budget: u32,
    /// The path's minimum RTT, microseconds.
    pub rtt_us: u32,
    /// `CLOCK_MONOTONIC` nanoseconds after which the entry is not used.
    pub expires_ns: u64,
}

/// Key: the peer's IPv6 address, or its IPv4 address mapped (`::ffff:a.b.c.d`), as the
/// bytes appear on the wire.
pub(crate) type MapKey = [u8; 16];

const VALUE_BUDGET: i16 = 0;
const VALUE_RTT: i16 = 4;
const VALUE_EXPIRES: i16 = 8;

// bpf(2) commands, program, map and attach types (linux/bpf.h).
const BPF_MAP_CREATE: libc::c_int = 0;
const BPF_MAP_LOOKUP_ELEM: libc::c_int = 1;
const BPF_MAP_UPDATE_ELEM: libc::c_int = 2;
const BPF_PROG_LOAD: libc::c_int = 5;
const BPF_LINK_CREATE: libc::c_int = 28;
const BPF_MAP_TYPE_LRU_HASH: u32 = 9;
const BPF_PROG_TYPE_SOCK_OPS: u32 = 13;
const BPF_CGROUP_SOCK_OPS: u32 = 3;
/// `union bpf_attr` is 144 bytes on current kernels; older ones accept a shorter prefix as
/// long as the tail is zero, which it is.
const ATTR_SIZE: usize = 144;

// struct bpf_sock_ops offsets.
const OPS_OP: i16 = 0;
const OPS_FAMILY: i16 = 20;
const OPS_REMOTE_IP4: i16 = 24;
const OPS_REMOTE_IP6: i16 = 32;
const OPS_LOCAL_PORT: i16 = 68;
const OPS_SRTT_US: i16 = 80;
const BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB: i32 = 5;
const AF_INET: i32 = 2;
const AF_INET6: i32 = 10;
const SOL_TCP: i32 = 6;
const TCP_BPF_IW: i32 = 1001;
const FN_MAP_LOOKUP_ELEM: i32 = 1;
const FN_KTIME_GET_NS: i32 = 5;
const FN_SETSOCKOPT: i32 = 49;

/// The RTT a connection measured in its handshake must lie within [saved / 2, saved × 10]
/// (the bounds of QUIC's Careful Resume in this project).
const RTT_FLOOR_SHIFT: i32 = 1;
const RTT_CEILING_FACTOR: i32 = 10;
/// Segments a connection takes at least while the budget lasts: 64 KiB, the first receive
/// window Linux offers, in 1,448-byte segments.
const MIN_GRANT: i32 = 45;

fn attr() -> [u8; ATTR_SIZE] {
    [0; ATTR_SIZE]
}

fn put_u32(attr: &mut [u8; ATTR_SIZE], at: usize, v: u32) {
    attr[at..at + 4].copy_from_slice(&v.to_ne_bytes());
}

fn put_u64(attr: &mut [u8; ATTR_SIZE], at: usize, v: u64) {
    attr[at..at + 8].copy_from_slice(&v.to_ne_bytes());
}

fn sys_bpf(cmd: libc::c_int, attr: &mut [u8; ATTR_SIZE]) -> io::Result<libc::c_long> {
    // SAFETY: attr is a zero-padded `union bpf_attr` of the size passed, and every pointer
    // written into it refers to memory the caller keeps alive across the call.
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.as_mut_ptr(), ATTR_SIZE as u32) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn owned(fd: libc::c_long) -> OwnedFd {
    // SAFETY: bpf(2) returned a new descriptor that nothing else owns.
    unsafe { OwnedFd::from_raw_fd(fd as RawFd) }
}

/// The saved paths, shared with the program.
#[derive(Debug)]
pub(crate) struct PathMap {
    fd: OwnedFd,
}

impl PathMap {
    pub fn create(max_entries: u32) -> io::Result<Self> {
        let mut a = attr();
        put_u32(&mut a, 0, BPF_MAP_TYPE_LRU_HASH);
        put_u32(&mut a, 4, std::mem::size_of::<MapKey>() as u32);
        put_u32(&mut a, 8, std::mem::size_of::<MapValue>() as u32);
        put_u32(&mut a, 12, max_entries);
        a[28..28 + 10].copy_from_slice(b"xfer_paths");
        sys_bpf(BPF_MAP_CREATE, &mut a).map(|fd| Self { fd: owned(fd) })
    }

    pub fn put(&self, key: &MapKey, value: &MapValue) -> io::Result<()> {
        let mut a = attr();
        put_u32(&mut a, 0, self.fd.as_raw_fd() as u32);
        put_u64(&mut a, 8, key.as_ptr() as u64);
        put_u64(&mut a, 16, value as *const MapValue as u64);
        sys_bpf(BPF_MAP_UPDATE_ELEM, &mut a).map(drop)
    }

    pub fn get(&self, key: &MapKey) -> io::Result<Option<MapValue>> {
        let mut value = MapValue::default();
        let mut a = attr();
        put_u32(&mut a, 0, self.fd.as_raw_fd() as u32);
        put_u64(&mut a, 8, key.as_ptr() as u64);
        put_u64(&mut a, 16, &mut value as *mut MapValue as u64);
        match sys_bpf(BPF_MAP_LOOKUP_ELEM, &mut a) {
            Ok(_) => Ok(Some(value)),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// The loaded program, linked to a cgroup for as long as this lives (a BPF link is undone
/// when its last descriptor closes, so a crashed server leaves nothing attached).
#[derive(Debug)]
pub(crate) struct Attached {
    _prog: OwnedFd,
    _link: OwnedFd,
}

/// Load the program for connections accepted on `port` and link it to `cgroup`.
pub(crate) fn attach(map: &PathMap, port: u16, cgroup: &OwnedFd) -> io::Result<Attached> {
    let insns = program(map.fd.as_raw_fd(), port);
    let prog = load(&insns)?;
    let mut a = attr();
    put_u32(&mut a, 0, prog.as_raw_fd() as u32);
    put_u32(&mut a, 4, cgroup.as_raw_fd() as u32);
    put_u32(&mut a, 8, BPF_CGROUP_SOCK_OPS);
    let link = sys_bpf(BPF_LINK_CREATE, &mut a)
        .map_err(|e| io::Error::new(e.kind(), format!("linking the sock_ops program: {e}")))?;
    Ok(Attached {
        _prog: prog,
        _link: owned(link),
    })
}

fn load(insns: &[Insn]) -> io::Result<OwnedFd> {
    // The licence string only gates GPL-only helpers; the three used here are not.
    let license = CString::new("Dual MIT/GPL").map_err(io::Error::other)?;
    let try_load = |log: Option<&mut Vec<u8>>| {
        let mut a = attr();
        put_u32(&mut a, 0, BPF_PROG_TYPE_SOCK_OPS);
        put_u32(&mut a, 4, insns.len() as u32);
        put_u64(&mut a, 8, insns.as_ptr() as u64);
        put_u64(&mut a, 16, license.as_ptr() as u64);
        if let Some(log) = log {
            put_u32(&mut a, 24, 1);
            put_u32(&mut a, 28, log.len() as u32);
            put_u64(&mut a, 32, log.as_mut_ptr() as u64);
        }
        a[48..48 + 15].copy_from_slice(b"xfer_tcp_resume");
        sys_bpf(BPF_PROG_LOAD, &mut a).map(owned)
    };
    match try_load(None) {
        Ok(fd) => Ok(fd),
        Err(e)
            if e.raw_os_error() == Some(libc::EACCES) || e.raw_os_error() == Some(libc::EINVAL) =>
        {
            // Refused by the verifier: load again with its log, for the error message.
            let mut log = vec![0u8; 64 << 10];
            let again = try_load(Some(&mut log));
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            let text = String::from_utf8_lossy(&log[..end]);
            let tail: String = text.lines().rev().take(6).collect::<Vec<_>>().join(" | ");
            match again {
                Ok(fd) => Ok(fd),
                Err(_) => Err(io::Error::new(
                    e.kind(),
                    format!("the verifier refused the sock_ops program: {e} ({tail})"),
                )),
            }
        }
        Err(e) => Err(e),
    }
}

/// One BPF instruction (`struct bpf_insn`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Insn {
    code: u8,
    regs: u8,
    off: i16,
    imm: i32,
}

// Instruction classes, sizes, modes, operations and sources (linux/bpf_common.h, bpf.h).
const LD: u8 = 0x00;
const LDX: u8 = 0x01;
const STX: u8 = 0x03;
const ALU: u8 = 0x04;
const JMP: u8 = 0x05;
const ALU64: u8 = 0x07;
const W: u8 = 0x00;
const DW: u8 = 0x18;
const IMM: u8 = 0x00;
const MEM: u8 = 0x60;
const ATOMIC: u8 = 0xc0;
const ADD: u8 = 0x00;
const MUL: u8 = 0x20;
const RSH: u8 = 0x70;
const MOV: u8 = 0xb0;
const K: u8 = 0x00;
const X: u8 = 0x08;
const JA: u8 = 0x00;
const JEQ: u8 = 0x10;
const JGT: u8 = 0x20;
const JNE: u8 = 0x50;
const JLT: u8 = 0xa0;
const JGE: u8 = 0x30;
const JLE: u8 = 0xb0;
const CALL: u8 = 0x80;
const EXIT: u8 = 0x90;
const PSEUDO_MAP_FD: u8 = 1;

const R0: u8 = 0;
const R1: u8 = 1;
const R2: u8 = 2;
const R3: u8 = 3;
const R4: u8 = 4;
const R5: u8 = 5;
const R6: u8 = 6;
const R7: u8 = 7;
const R8: u8 = 8;
const FP: u8 = 10;

/// A tiny assembler: instructions plus forward jumps to named labels, patched at the end.
struct Asm {
    insns: Vec<Insn>,
    jumps: Vec<(usize, &'static str)>,
    labels: Vec<(&'static str, usize)>,
}

impl Asm {
    fn new() -> Self {
        Self {
            insns: Vec::new(),
            jumps: Vec::new(),
            labels: Vec::new(),
        }
    }
    fn raw(&mut self, code: u8, dst: u8, src: u8, off: i16, imm: i32) {
        self.insns.push(Insn {
            code,
            regs: dst | (src << 4),
            off,
            imm,
        });
    }
    fn mov64(&mut self, dst: u8, src: u8) {
        self.raw(ALU64 | MOV | X, dst, src, 0, 0);
    }
    fn mov64_imm(&mut self, dst: u8, imm: i32) {
        self.raw(ALU64 | MOV | K, dst, 0, 0, imm);
    }
    /// 32-bit move: the upper half is zeroed, so `imm` is taken as an unsigned 32-bit value.
    fn mov32_imm(&mut self, dst: u8, imm: u32) {
        self.raw(ALU | MOV | K, dst, 0, 0, imm as i32);
    }
    fn alu64_imm(&mut self, op: u8, dst: u8, imm: i32) {
        self.raw(ALU64 | op | K, dst, 0, 0, imm);
    }
    fn add64_imm(&mut self, dst: u8, imm: i32) {
        self.alu64_imm(ADD, dst, imm);
    }
    fn load32(&mut self, dst: u8, src: u8, off: i16) {
        self.raw(LDX | MEM | W, dst, src, off, 0);
    }
    fn load64(&mut self, dst: u8, src: u8, off: i16) {
        self.raw(LDX | MEM | DW, dst, src, off, 0);
    }
    fn store32(&mut self, dst: u8, off: i16, src: u8) {
        self.raw(STX | MEM | W, dst, src, off, 0);
    }
    /// `lock *(u32 *)(dst + off) += src`.
    fn atomic_add32(&mut self, dst: u8, off: i16, src: u8) {
        self.raw(STX | ATOMIC | W, dst, src, off, 0);
    }
    fn load_map_fd(&mut self, dst: u8, fd: RawFd) {
        self.raw(LD | DW | IMM, dst, PSEUDO_MAP_FD, 0, fd);
        self.raw(0, 0, 0, 0, 0);
    }
    fn call(&mut self, helper: i32) {
        self.raw(JMP | CALL, 0, 0, 0, helper);
    }
    fn exit(&mut self) {
        self.raw(JMP | EXIT, 0, 0, 0, 0);
    }
    fn jump_imm(&mut self, op: u8, dst: u8, imm: i32, to: &'static str) {
        self.jumps.push((self.insns.len(), to));
        self.raw(JMP | op | K, dst, 0, 0, imm);
    }
    fn jump_reg(&mut self, op: u8, dst: u8, src: u8, to: &'static str) {
        self.jumps.push((self.insns.len(), to));
        self.raw(JMP | op | X, dst, src, 0, 0);
    }
    fn goto(&mut self, to: &'static str) {
        self.jump_imm(JA, 0, 0, to);
    }
    fn label(&mut self, name: &'static str) {
        self.labels.push((name, self.insns.len()));
    }
    fn finish(mut self) -> Vec<Insn> {
        for (at, to) in &self.jumps {
            let target = self
                .labels
                .iter()
                .find(|(n, _)| n == to)
                .map(|(_, i)| *i)
                .expect("every jump names a label of the program");
            self.insns[*at].off = (target as i64 - *at as i64 - 1) as i16;
        }
        self.insns
    }
}

/// The program: on the passive open of a connection to `port`, look the peer up; if its
/// entry has not expired, has a budget and the handshake's RTT (when the kernel has one: not
/// for a Fast Open connection, set up before any round trip) matches the saved one, take half
/// of the budget (at least [`MIN_GRANT`] while it lasts) as the connection's initial window.
pub(crate) fn program(map_fd: RawFd, port: u16) -> Vec<Insn> {
    let mut a = Asm::new();
    a.mov64(R6, R1);
    a.load32(R2, R6, OPS_OP);
    a.jump_imm(JNE, R2, BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB, "out");
    a.load32(R2, R6, OPS_LOCAL_PORT);
    a.jump_imm(JNE, R2, i32::from(port), "out");
    // The key at fp-16..fp: the peer's address as 16 bytes.
    a.load32(R2, R6, OPS_FAMILY);
    a.jump_imm(JNE, R2, AF_INET, "v6");
    a.mov64_imm(R3, 0);
    a.store32(FP, -16, R3);
    a.store32(FP, -12, R3);
    // Bytes 00 00 ff ff, read as a little- or big-endian word.
    a.mov32_imm(R3, u32::from_ne_bytes([0, 0, 0xff, 0xff]));
    a.store32(FP, -8, R3);
    a.load32(R3, R6, OPS_REMOTE_IP4);
    a.store32(FP, -4, R3);
    a.goto("lookup");
    a.label("v6");
    a.jump_imm(JNE, R2, AF_INET6, "out");
    for i in 0..4i16 {
        a.load32(R3, R6, OPS_REMOTE_IP6 + 4 * i);
        a.store32(FP, -16 + 4 * i, R3);
    }
    a.label("lookup");
    a.load_map_fd(R1, map_fd);
    a.mov64(R2, FP);
    a.add64_imm(R2, -16);
    a.call(FN_MAP_LOOKUP_ELEM);
    a.jump_imm(JEQ, R0, 0, "out");
    a.mov64(R7, R0);
    a.call(FN_KTIME_GET_NS);
    a.load64(R1, R7, VALUE_EXPIRES);
    a.jump_reg(JGT, R0, R1, "out");
    a.load32(R2, R6, OPS_SRTT_US);
    a.jump_imm(JEQ, R2, 0, "grant");
    a.alu64_imm(RSH, R2, 3);
    a.load32(R3, R7, VALUE_RTT);
    a.mov64(R4, R3);
    a.alu64_imm(MUL, R4, RTT_CEILING_FACTOR);
    a.jump_reg(JGT, R2, R4, "out");
    a.alu64_imm(RSH, R3, RTT_FLOOR_SHIFT);
    a.jump_reg(JLT, R2, R3, "out");
    a.label("grant");
    // Half of what is left, so that the lanes opening together all start ahead, but no less
    // than a receiver's usual first window (64 KiB) while the budget lasts.
    a.load32(R3, R7, VALUE_BUDGET);
    a.mov64(R8, R3);
    a.alu64_imm(RSH, R8, 1);
    a.jump_imm(JGE, R8, MIN_GRANT, "take");
    a.mov64_imm(R8, MIN_GRANT);
    a.jump_reg(JLE, R8, R3, "take");
    a.mov64(R8, R3);
    a.label("take");
    // Not worth a jump: the kernel's own initial window is 10 segments.
    a.jump_imm(JLT, R8, 11, "out");
    a.mov64(R2, R8);
    a.alu64_imm(MUL, R2, -1);
    a.atomic_add32(R7, VALUE_BUDGET, R2);
    a.store32(FP, -24, R8);
    a.mov64(R1, R6);
    a.mov64_imm(R2, SOL_TCP);
    a.mov64_imm(R3, TCP_BPF_IW);
    a.mov64(R4, FP);
    a.add64_imm(R4, -24);
    a.mov64_imm(R5, 4);
    a.call(FN_SETSOCKOPT);
    a.label("out");
    a.mov64_imm(R0, 1);
    a.exit();
    a.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_jump_lands_inside_the_program_and_it_ends_in_exit() {
        let p = program(7, 8443);
        assert!(p.len() < 80, "{} instructions", p.len());
        assert_eq!(p.last().map(|i| i.code), Some(JMP | EXIT));
        for (at, insn) in p.iter().enumerate() {
            let class = insn.code & 0x07;
            let op = insn.code & 0xf0;
            if class == JMP && op != CALL && op != EXIT {
                let to = at as i64 + 1 + i64::from(insn.off);
                assert!((0..p.len() as i64).contains(&to), "jump at {at} to {to}");
            }
        }
        // The map reference: a two-slot load with the map's descriptor.
        let load = p
            .iter()
            .position(|i| i.code == LD | DW | IMM)
            .expect("a map load");
        assert_eq!((p[load].regs >> 4, p[load].imm), (PSEUDO_MAP_FD, 7));
        assert_eq!(
            p[load + 1],
            Insn {
                code: 0,
                regs: 0,
                off: 0,
                imm: 0
            }
        );
        // The port is compared as the kernel stores it (host order).
        assert!(p.iter().any(|i| i.code == JMP | JNE | K && i.imm == 8443));
    }
}
