//! Raw `AF_PACKET` sockets bound to one network interface: the I/O half of the
//! testbed's user-space WAN emulator, which forwards whole Ethernet frames between
//! two interfaces. Needs `CAP_NET_RAW` (root).
//!
//! The socket never sees its own transmissions (`PACKET_IGNORE_OUTGOING`), otherwise a
//! forwarder would read back every frame it sends and loop it. Frames are moved in
//! batches (`recvmmsg`/`sendmmsg`), one syscall per batch instead of one per frame, and
//! carry the kernel's receive timestamp, so a forwarder that reads them late still
//! knows when they arrived.

use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use crate::packet_ring::{Lent, RxRing};

/// Frames moved by one `recvmmsg`/`sendmmsg` call at most.
pub const MAX_BATCH: usize = 64;

// Kernel ABI constants (linux/if_packet.h, asm-generic/socket.h) that `libc` does not
// export on every target.
const PACKET_ADD_MEMBERSHIP: libc::c_int = 1;
const PACKET_MR_PROMISC: libc::c_ushort = 1;
const PACKET_QDISC_BYPASS: libc::c_int = 20;
const PACKET_STATISTICS: libc::c_int = 6;
const PACKET_VNET_HDR: libc::c_int = 15;
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
/// Timestamps as `struct __kernel_timespec` (two i64) on every target (Linux >= 5.1).
const SO_TIMESTAMPNS_NEW: libc::c_int = 64;
/// Room for one timestamp control message (16 header + 16 data bytes) and spare.
const CMSG_WORDS: usize = 8;

/// Length of the `struct virtio_net_hdr` that prefixes every frame once
/// [`PacketSocket::enable_vnet_hdr`] was called.
pub const VNET_HDR_LEN: usize = 10;

/// What [`PacketSocket::recv_batch`] learnt about one frame besides its bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RxMeta {
    /// Length of the frame; greater than its buffer if the frame was truncated.
    pub len: usize,
    /// When the kernel took the frame in (`CLOCK_REALTIME`, since the Unix epoch), if it
    /// said. Lets a user-space forwarder measure delay from the wire, not from its own,
    /// later wake-up.
    pub stamp: Option<std::time::Duration>,
}

/// `struct packet_mreq` of linux/if_packet.h.
#[repr(C)]
#[derive(Clone, Copy)]
struct PacketMreq {
    mr_ifindex: libc::c_int,
    mr_type: libc::c_ushort,
    mr_alen: libc::c_ushort,
    mr_address: [u8; 8],
}

/// A raw packet socket on one interface: receives every frame arriving on it (any
/// protocol, any destination MAC) and transmits frames verbatim. Non-blocking.
#[derive(Debug)]
pub struct PacketSocket {
    /// Before `fd`: the ring is unmapped before the socket closes.
    rx_ring: Option<RxRing>,
    fd: OwnedFd,
    ifindex: u32,
    ifname: String,
}

impl PacketSocket {
    /// Opens a raw socket bound to `ifname` (in the caller's network namespace).
    ///
    /// Puts the interface in promiscuous mode for the socket's lifetime (a transparent
    /// wire must see frames for every MAC), bypasses the qdisc on transmit and, where
    /// the kernel allows, enlarges the socket buffers to ride out scheduling hiccups.
    pub fn bind(ifname: &str) -> io::Result<PacketSocket> {
        Self::open(ifname, libc::ETH_P_ALL as u16, true, &[], 0)
    }

    /// Opens a raw socket on `ifname` that receives only frames of `ethertype` sent to
    /// this interface's MAC (or broadcast), without timestamps: what a lane of one
    /// protocol needs, leaving every other frame to the kernel's stack.
    /// `filter`, a classic BPF program (none if empty), is attached before the socket
    /// is bound, so that no frame it refuses is ever queued. With `ring_frames` > 0 the
    /// socket receives into a ring of about that many frames of the interface's MTU
    /// ([`PacketSocket::ring_frame`]), or, where the kernel refuses one, as without.
    pub fn bind_protocol(
        ifname: &str,
        ethertype: u16,
        filter: &[libc::sock_filter],
        ring_frames: usize,
    ) -> io::Result<PacketSocket> {
        Self::open(ifname, ethertype, false, filter, ring_frames)
    }

    fn open(
        ifname: &str,
        protocol: u16,
        promiscuous: bool,
        filter: &[libc::sock_filter],
        ring_frames: usize,
    ) -> io::Result<PacketSocket> {
        let ctx = |e: io::Error, what: &str| -> io::Error {
            let hint = match e.raw_os_error() {
                Some(libc::EPERM) | Some(libc::EACCES) => " (needs root or CAP_NET_RAW)",
                Some(libc::ENODEV) => " (no such interface in this network namespace)",
                _ => "",
            };
            io::Error::new(e.kind(), format!("packet socket on {ifname}: {what}: {e}{hint}"))
        };
        // Protocol 0 until bind(): a socket created with ETH_P_ALL would start
        // capturing frames of every interface before being bound to this one.
        // SAFETY: plain syscall with constant arguments; the result is checked.
        let raw = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        };
        if raw < 0 {
            return Err(ctx(io::Error::last_os_error(), "socket(AF_PACKET)"));
        }
        // SAFETY: `raw` is a fresh descriptor owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let ifindex = rustix::net::netdevice::name_to_index(&fd, ifname)
            .map_err(|e| ctx(e.into(), "interface index"))?;
        let mut sock = PacketSocket {
            rx_ring: None,
            fd,
            ifindex,
            ifname: ifname.to_owned(),
        };

        sock.setsockopt(libc::SOL_PACKET, PACKET_IGNORE_OUTGOING, 1 as libc::c_int)
            .map_err(|e| ctx(e, "PACKET_IGNORE_OUTGOING (needs Linux >= 4.20)"))?;
        sock.setsockopt(libc::SOL_PACKET, PACKET_QDISC_BYPASS, 1 as libc::c_int)
            .map_err(|e| ctx(e, "PACKET_QDISC_BYPASS"))?;
        if promiscuous {
            let mreq = PacketMreq {
                mr_ifindex: ifindex as libc::c_int,
                mr_type: PACKET_MR_PROMISC,
                mr_alen: 0,
                mr_address: [0; 8],
            };
            sock.setsockopt(libc::SOL_PACKET, PACKET_ADD_MEMBERSHIP, mreq)
                .map_err(|e| ctx(e, "promiscuous mode"))?;
        }
        if !filter.is_empty() {
            let prog = libc::sock_fprog {
                len: filter.len() as u16,
                filter: filter.as_ptr() as *mut libc::sock_filter,
            };
            // The kernel copies the program during the call; `filter` outlives it.
            sock.setsockopt(libc::SOL_SOCKET, libc::SO_ATTACH_FILTER, prog)
                .map_err(|e| ctx(e, "SO_ATTACH_FILTER"))?;
        }
        // Best effort: the plain sizes are capped by net.core.[rw]mem_max.
        let _ = sock.set_buffer_sizes(8 << 20, 8 << 20);
        // Best effort too: without it, RxMeta::stamp is None. Only a forwarder wants
        // it: a timestamp per frame costs the receive path a control message.
        if promiscuous {
            let _ = sock.setsockopt(libc::SOL_SOCKET, SO_TIMESTAMPNS_NEW, 1 as libc::c_int);
        }

        if ring_frames > 0 {
            // Before bind(), so that no frame is queued outside the ring.
            // Room for the Ethernet header and a VLAN tag. A kernel that refuses a ring (no
            // memory for it) leaves recv(), which works.
            let max_frame = sock.mtu().map_err(|e| ctx(e, "MTU"))? + 18;
            sock.rx_ring = RxRing::new(&sock, max_frame, ring_frames).ok();
        }
        // SAFETY: sockaddr_ll is plain old data; all-zero is a valid value.
        let mut sll: libc::sockaddr_ll = unsafe { zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = protocol.to_be();
        sll.sll_ifindex = ifindex as i32;
        // SAFETY: `sll` is a valid sockaddr_ll and the length passed is its size.
        let rc = unsafe {
            libc::bind(
                sock.fd.as_raw_fd(),
                &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
                size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(ctx(io::Error::last_os_error(), "bind"));
        }
        Ok(sock)
    }

    /// Whether frames arrive in a receive ring (read them with
    /// [`PacketSocket::ring_frame`]; `recv` finds nothing then).
    pub fn has_ring(&self) -> bool {
        self.rx_ring.is_some()
    }

    /// The next frame of the receive ring, without a system call: its bytes (cut at the
    /// ring's slot size; the second value is the length it had) until the
    /// [`RingFrame`] is dropped, which hands the slot back to the kernel.
    pub fn ring_frame(&mut self) -> Option<RingFrame<'_>> {
        let ring = self.rx_ring.as_mut()?;
        let lent = ring.peek()?;
        Some(RingFrame { ring, lent })
    }

    /// The status word of the receive ring's next slot (see
    /// [`crate::packet_ring::frame_ready`]), if the socket has a ring.
    pub(crate) fn ring_next_status(&self) -> Option<*const std::sync::atomic::AtomicU32> {
        self.rx_ring.as_ref().map(RxRing::next_status)
    }

    /// Kernel index of the bound interface.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// Name of the bound interface.
    pub fn ifname(&self) -> &str {
        &self.ifname
    }

    /// MTU of the bound interface: frames up to `mtu + 14` (+4 with a VLAN tag) fit.
    pub fn mtu(&self) -> io::Result<usize> {
        let mut req = self.ifreq()?;
        // SAFETY: SIOCGIFMTU reads the NUL-terminated name and writes ifru_mtu of `req`,
        // which outlives the call.
        let rc = unsafe { libc::ioctl(self.fd.as_raw_fd(), libc::SIOCGIFMTU as _, &mut req) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: SIOCGIFMTU filled the ifru_mtu member.
        Ok(unsafe { req.ifr_ifru.ifru_mtu }.max(0) as usize)
    }

    /// A request about the bound interface, its name filled in.
    fn ifreq(&self) -> io::Result<libc::ifreq> {
        let name = self.ifname.as_bytes();
        // SAFETY: ifreq is plain old data; all-zero is a valid value.
        let mut req: libc::ifreq = unsafe { zeroed() };
        if name.len() >= req.ifr_name.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "interface name too long",
            ));
        }
        for (d, s) in req.ifr_name.iter_mut().zip(name) {
            *d = *s as libc::c_char;
        }
        Ok(req)
    }

    /// From now on, every received frame is preceded by a [`VNET_HDR_LEN`]-byte
    /// `struct virtio_net_hdr`, and every frame sent must be. Passing a received header on
    /// with its frame keeps checksum offload state intact: a frame whose checksum the
    /// sender left to the "hardware" (veth's default) is still completed by the kernel
    /// after forwarding, instead of arriving with a bad checksum.
    pub fn enable_vnet_hdr(&self) -> io::Result<()> {
        self.setsockopt(libc::SOL_PACKET, PACKET_VNET_HDR, 1 as libc::c_int)
            .map_err(|e| io::Error::new(e.kind(), format!("PACKET_VNET_HDR on {}: {e}", self.ifname)))
    }

    /// Frames the kernel dropped because the receive buffer was full, since the last
    /// call (reading resets the kernel's counter).
    pub fn take_drops(&self) -> io::Result<u64> {
        let mut stats = [0u32; 2]; // struct tpacket_stats { tp_packets, tp_drops }
        let mut len = size_of::<[u32; 2]>() as libc::socklen_t;
        // SAFETY: `stats` and `len` are live and writable for the whole call, and `len`
        // holds the size of `stats`.
        let rc = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                PACKET_STATISTICS,
                stats.as_mut_ptr().cast(),
                &mut len,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(u64::from(stats[1]))
    }

    /// Sets the kernel receive and send buffer sizes in bytes, above
    /// `net.core.[rw]mem_max` when the caller has `CAP_NET_ADMIN`.
    pub fn set_buffer_sizes(&self, rcv: usize, snd: usize) -> io::Result<()> {
        let (rcv, snd) = (
            rcv.min(i32::MAX as usize) as libc::c_int,
            snd.min(i32::MAX as usize) as libc::c_int,
        );
        #[cfg(any(
            target_arch = "x86_64",
            target_arch = "x86",
            target_arch = "aarch64",
            target_arch = "riscv64"
        ))]
        if self
            .setsockopt(libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, rcv)
            .is_ok()
            && self
                .setsockopt(libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, snd)
                .is_ok()
        {
            return Ok(());
        }
        self.setsockopt(libc::SOL_SOCKET, libc::SO_RCVBUF, rcv)?;
        self.setsockopt(libc::SOL_SOCKET, libc::SO_SNDBUF, snd)
    }

    /// Receives one frame into `buf` (behind its virtio header if enabled); returns its
    /// length, which exceeds `buf.len()` if the frame was truncated. `WouldBlock` when
    /// no frame is waiting.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: `buf` is valid for writes of `buf.len()` bytes for the whole call.
        let n = unsafe {
            libc::recv(
                self.fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT | libc::MSG_TRUNC,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n as usize)
    }

    /// Transmits one complete Ethernet frame (destination MAC first, behind a virtio
    /// header if enabled).
    pub fn send(&self, frame: &[u8]) -> io::Result<()> {
        // SAFETY: `frame` is valid for reads of `frame.len()` bytes for the whole call.
        let n = unsafe {
            libc::send(
                self.fd.as_raw_fd(),
                frame.as_ptr().cast(),
                frame.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// The interface's hardware (MAC) address.
    pub fn mac(&self) -> io::Result<[u8; 6]> {
        let mut req = self.ifreq()?;
        // SAFETY: SIOCGIFHWADDR reads the NUL-terminated name and writes ifru_hwaddr of
        // `req`, which outlives the call.
        let rc = unsafe { libc::ioctl(self.fd.as_raw_fd(), libc::SIOCGIFHWADDR as _, &mut req) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: SIOCGIFHWADDR filled the ifru_hwaddr member.
        let data = unsafe { req.ifr_ifru.ifru_hwaddr.sa_data };
        Ok(std::array::from_fn(|i| data[i] as u8))
    }

    /// Receives up to `min(bufs.len(), meta.len(), MAX_BATCH)` waiting frames with one
    /// syscall, frame `i` into `bufs[i]` and its length and arrival time into `meta[i]`.
    /// Returns how many arrived; `WouldBlock` when none was waiting.
    pub fn recv_batch<B: AsMut<[u8]>>(&self, bufs: &mut [B], meta: &mut [RxMeta]) -> io::Result<usize> {
        let n = bufs.len().min(meta.len()).min(MAX_BATCH);
        if n == 0 {
            return Ok(0);
        }
        // SAFETY: iovec and mmsghdr are plain old data; all-zero is a valid value.
        let mut iov: [libc::iovec; MAX_BATCH] = unsafe { zeroed() };
        // SAFETY: as above.
        let mut msgs: [libc::mmsghdr; MAX_BATCH] = unsafe { zeroed() };
        let mut ctl = [[0u64; CMSG_WORDS]; MAX_BATCH];
        for i in 0..n {
            let b = bufs[i].as_mut();
            iov[i] = libc::iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: b.len(),
            };
            msgs[i].msg_hdr.msg_iov = &mut iov[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
            msgs[i].msg_hdr.msg_control = ctl[i].as_mut_ptr().cast();
            msgs[i].msg_hdr.msg_controllen = size_of::<[u64; CMSG_WORDS]>() as _;
        }
        // SAFETY: the first `n` headers point at iovecs that describe `n` distinct
        // mutable buffers and at `n` distinct control buffers, all borrowed for the
        // whole call; no address buffer.
        let got = unsafe {
            libc::recvmmsg(
                self.fd.as_raw_fd(),
                msgs.as_mut_ptr(),
                n as libc::c_uint,
                libc::MSG_DONTWAIT | libc::MSG_TRUNC,
                std::ptr::null_mut(),
            )
        };
        if got < 0 {
            return Err(io::Error::last_os_error());
        }
        let got = got as usize;
        for i in 0..got {
            meta[i] = RxMeta {
                len: msgs[i].msg_len as usize,
                stamp: stamp_of(&msgs[i].msg_hdr),
            };
        }
        Ok(got)
    }

    /// Transmits up to `min(frames.len(), MAX_BATCH)` frames with one syscall; returns
    /// how many went. An error means that not even the first frame went; retry or drop
    /// it and pass the rest again.
    pub fn send_batch<B: AsRef<[u8]>>(&self, frames: &[B]) -> io::Result<usize> {
        let n = frames.len().min(MAX_BATCH);
        if n == 0 {
            return Ok(0);
        }
        // SAFETY: iovec and mmsghdr are plain old data; all-zero is a valid value.
        let mut iov: [libc::iovec; MAX_BATCH] = unsafe { zeroed() };
        // SAFETY: as above.
        let mut msgs: [libc::mmsghdr; MAX_BATCH] = unsafe { zeroed() };
        for i in 0..n {
            let f = frames[i].as_ref();
            iov[i] = libc::iovec {
                iov_base: f.as_ptr() as *mut libc::c_void,
                iov_len: f.len(),
            };
            msgs[i].msg_hdr.msg_iov = &mut iov[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
        }
        // SAFETY: the first `n` headers point at iovecs describing buffers borrowed for
        // the whole call; the kernel only reads them (the cast to *mut is for the ABI).
        let sent = unsafe {
            libc::sendmmsg(
                self.fd.as_raw_fd(),
                msgs.as_mut_ptr(),
                n as libc::c_uint,
                libc::MSG_DONTWAIT,
            )
        };
        if sent < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(sent as usize)
    }

    pub(crate) fn setsockopt<T: Copy>(
        &self,
        level: libc::c_int,
        name: libc::c_int,
        value: T,
    ) -> io::Result<()> {
        // SAFETY: `value` is a live, properly sized option value for the whole call.
        let rc = unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                level,
                name,
                &value as *const T as *const libc::c_void,
                size_of::<T>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// A frame lent by the receive ring; its slot goes back to the kernel on drop.
pub struct RingFrame<'a> {
    ring: &'a mut RxRing,
    lent: Lent,
}

impl RingFrame<'_> {
    /// The frame from its Ethernet header on, and the length it had on the wire
    /// (greater than the bytes if the slot cut it).
    pub fn bytes(&self) -> (&[u8], usize) {
        (self.ring.bytes(self.lent), self.lent.len)
    }
}

impl Drop for RingFrame<'_> {
    fn drop(&mut self) {
        self.ring.release();
    }
}

/// The `SCM_TIMESTAMPNS_NEW` control message of a received message, if any.
fn stamp_of(hdr: &libc::msghdr) -> Option<std::time::Duration> {
    if hdr.msg_controllen < size_of::<libc::cmsghdr>() as _ {
        return None;
    }
    // SAFETY: the kernel filled `msg_controllen` bytes of the control buffer that
    // `hdr` points at, which is 8-byte aligned and still borrowed by the caller.
    let cmsg = unsafe { &*libc::CMSG_FIRSTHDR(hdr) };
    let want = size_of::<libc::cmsghdr>() + 16;
    if cmsg.cmsg_level != libc::SOL_SOCKET
        || cmsg.cmsg_type != SO_TIMESTAMPNS_NEW
        || (cmsg.cmsg_len as usize) < want
    {
        return None;
    }
    // SAFETY: the message is long enough for its 16 data bytes, checked above; they may
    // be unaligned for i64 in principle, hence read_unaligned.
    let ts = unsafe { std::ptr::read_unaligned(libc::CMSG_DATA(cmsg) as *const [i64; 2]) };
    (ts[0] >= 0 && (0..1_000_000_000).contains(&ts[1]))
        .then(|| std::time::Duration::new(ts[0] as u64, ts[1] as u32))
}

impl AsFd for PacketSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;
    use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

    fn is_root() -> bool {
        rustix::process::geteuid().is_root()
    }

    #[test]
    fn missing_interface_is_a_clear_error() {
        let err = PacketSocket::bind("pt-no-such-if0").unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("pt-no-such-if0"), "{msg}");
        if !is_root() {
            assert!(msg.contains("CAP_NET_RAW"), "{msg}");
        }
    }

    /// Deletes the namespace when the test ends, also when it fails.
    struct Netns(String);
    impl Drop for Netns {
        fn drop(&mut self) {
            let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
        }
    }

    fn ip(args: &[&str]) {
        let st = Command::new("ip").args(args).status().expect("run ip");
        assert!(st.success(), "ip {args:?} failed");
    }

    /// Runs `f` inside the namespace on a fresh thread, so the test's other threads
    /// stay where they are. `setns` is rustix's safe wrapper.
    fn in_netns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
        let path = format!("/run/netns/{ns}");
        std::thread::spawn(move || {
            let file = std::fs::File::open(&path).expect("open netns");
            rustix::thread::move_into_link_name_space(
                file.as_fd(),
                Some(rustix::thread::LinkNameSpaceType::Network),
            )
            .expect("setns");
            f()
        })
        .join()
        .expect("netns thread")
    }

    /// A fresh namespace `PREFIX-PID` holding the veth pair v0 - v1, both up.
    fn veth_pair_in_a_netns(prefix: &str) -> Netns {
        let ns = Netns(format!("{prefix}-{}", std::process::id()));
        ip(&["netns", "add", &ns.0]);
        ip(&[
            "-n", &ns.0, "link", "add", "v0", "type", "veth", "peer", "name", "v1",
        ]);
        ip(&["-n", &ns.0, "link", "set", "v0", "up"]);
        ip(&["-n", &ns.0, "link", "set", "v1", "up"]);
        ns
    }

    #[test]
    fn frame_crosses_a_veth_pair() {
        if !is_root() {
            eprintln!("skipping frame_crosses_a_veth_pair: needs root (ip netns, CAP_NET_RAW)");
            return;
        }
        let ns = veth_pair_in_a_netns("pt-pkt");
        in_netns(&ns.0, || {
            let s0 = PacketSocket::bind("v0").expect("bind v0");
            let s1 = PacketSocket::bind("v1").expect("bind v1");
            assert_eq!(s0.mtu().unwrap(), 1500);
            // Broadcast, EtherType 0x88b5 (local experimental), payload marker.
            let mut frame = vec![0xffu8; 6];
            frame.extend_from_slice(&[2, 0, 0, 0, 0, 1, 0x88, 0xb5]);
            frame.extend_from_slice(b"pontoon packet test");
            frame.resize(60, 0);
            s0.send(&frame).expect("send");
            s0.send_batch(&[&frame[..], &frame[..]]).expect("send_batch");
            let mut got = 0;
            let mut bufs = vec![vec![0u8; 2048]; 4];
            let mut meta = [RxMeta::default(); 4];
            let deadline = Instant::now() + Duration::from_secs(2);
            while got < 3 && Instant::now() < deadline {
                match s1.recv_batch(&mut bufs, &mut meta) {
                    Ok(n) => {
                        for i in 0..n {
                            // Other traffic (IPv6 autoconf) may cross too.
                            if bufs[i][..meta[i].len] == frame[..] {
                                got += 1;
                                let age = SystemTime::now().duration_since(UNIX_EPOCH).unwrap()
                                    - meta[i].stamp.expect("kernel timestamp");
                                assert!(age < Duration::from_secs(2), "stamp {age:?} old");
                            }
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        std::thread::sleep(Duration::from_millis(1))
                    }
                    Err(e) => panic!("recv: {e}"),
                }
            }
            assert_eq!(got, 3, "frames sent on v0 must arrive on v1");
            // With virtio headers, a frame arrives behind one and goes out behind one.
            s1.enable_vnet_hdr().expect("vnet hdr on v1");
            s1.send(&[&[0u8; VNET_HDR_LEN][..], &frame[..]].concat())
                .expect("send with vnet hdr");
            let mut buf = [0u8; 2048];
            let deadline = Instant::now() + Duration::from_secs(2);
            let n = loop {
                match s0.recv(&mut buf) {
                    Ok(n) if buf[..n] == frame[..] => break n,
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(1))
                    }
                    Err(e) => panic!("recv on v0: {e}"),
                }
            };
            assert_eq!(n, frame.len());
            s0.enable_vnet_hdr().expect("vnet hdr on v0");
            s1.send(&[&[0u8; VNET_HDR_LEN][..], &frame[..]].concat())
                .expect("send with vnet hdr");
            let deadline = Instant::now() + Duration::from_secs(2);
            loop {
                match s0.recv(&mut buf) {
                    Ok(n) if n == VNET_HDR_LEN + frame.len() && buf[VNET_HDR_LEN..n] == frame[..] => break,
                    Ok(_) => {}
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(1))
                    }
                    Err(e) => panic!("recv on v0: {e}"),
                }
            }
            // The sender must not see its own frames.
            while let Ok(n) = s1.recv(&mut buf) {
                assert_ne!(&buf[VNET_HDR_LEN..n], &frame[..], "own transmission looped back");
            }
        });
    }

    #[test]
    fn frames_arrive_in_the_receive_ring_in_order_across_its_wrap() {
        if !is_root() {
            eprintln!("skipping frames_arrive_in_the_receive_ring_in_order_across_its_wrap: needs root (ip netns, CAP_NET_RAW)");
            return;
        }
        let ns = veth_pair_in_a_netns("pt-ring");
        in_netns(&ns.0, || {
            let tx = PacketSocket::bind("v0").expect("bind v0");
            let mut rx = PacketSocket::bind_protocol("v1", 0x88b5, &[], 8).expect("bind v1");
            assert!(rx.has_ring(), "the kernel gave no ring");
            assert!(rx.ring_frame().is_none(), "an empty ring lends nothing");
            // What a look without the port's lock reads says the same.
            let ready = |rx: &PacketSocket| {
                let status = rx.ring_next_status().expect("a ring");
                // SAFETY: from the ring of `rx`, which lives.
                unsafe { crate::packet_ring::frame_ready(status) }
            };
            assert!(!ready(&rx));
            let slots = rx.rx_ring.as_ref().unwrap().slots();
            let frame = |i: u32, len: usize| {
                let mut f = vec![0xffu8; 6];
                f.extend_from_slice(&[2, 0, 0, 0, 0, 1, 0x88, 0xb5]);
                f.extend_from_slice(&i.to_le_bytes());
                f.resize(len, (i % 251) as u8);
                f
            };
            // Three times round the ring, in bursts of half of it, sizes up to the MTU.
            let mut next = 0u32;
            for burst in 0..6 {
                let sent: Vec<Vec<u8>> = (0..slots as u32 / 2)
                    .map(|k| frame(burst * 1000 + k, 60 + (k as usize * 97) % 1455))
                    .collect();
                for f in &sent {
                    tx.send(f).expect("send");
                }
                let mut got = 0;
                let deadline = Instant::now() + Duration::from_secs(2);
                while got < sent.len() {
                    assert!(
                        Instant::now() < deadline,
                        "burst {burst}: {got} of {} arrived",
                        sent.len()
                    );
                    if !ready(&rx) {
                        assert!(rx.ring_frame().is_none(), "a frame the status word hides");
                        std::thread::sleep(Duration::from_millis(1));
                        continue;
                    }
                    let Some(f) = rx.ring_frame() else {
                        panic!("the status word shows a frame the ring does not lend");
                    };
                    let (bytes, len) = f.bytes();
                    assert_eq!(bytes.len(), len, "not cut");
                    assert_eq!(
                        bytes,
                        &sent[got][..],
                        "frame {got} of burst {burst} in order and whole"
                    );
                    got += 1;
                    next += 1;
                }
            }
            assert!(next as usize > 2 * slots);
            // Over the MTU's slot: cut at the slot, the length it had said.
            ip(&["link", "set", "v0", "mtu", "9000"]);
            ip(&["link", "set", "v1", "mtu", "9000"]);
            tx.send(&frame(7, 9000)).expect("send a jumbo frame");
            let deadline = Instant::now() + Duration::from_secs(2);
            let f = loop {
                if let Some(f) = rx.ring_frame() {
                    break f;
                }
                assert!(Instant::now() < deadline, "the jumbo frame did not arrive");
                std::thread::sleep(Duration::from_millis(1));
            };
            let (bytes, len) = f.bytes();
            assert_eq!(len, 9000);
            assert!(
                bytes.len() < len && bytes.len() >= 1500,
                "cut at the slot: {}",
                bytes.len()
            );
        });
    }
}
