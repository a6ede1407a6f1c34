//! A frame whose write fails (the lane's connection reset) stays queued, so that the
//! lane's failover completes its send when its copy goes again on another lane. A small
//! frame written at once (no frame queued before it) was lost instead: its message
//! arrived by the replay, its send never completed (`paths::a_reset_control_lane_…`
//! hung with 1 KiB frames on that path).

use std::io::IoSlice;
use std::os::fd::BorrowedFd;

use pontoon_transport::stream::{Pipe, StreamLink};
use pontoon_transport::{Buffer, Link, LinkError};
use proto::wire::data::{DataRepr, HeaderBytes};
use proto::Caps;

/// A socket whose connection was reset: every write fails.
struct Reset;

impl Pipe for Reset {
    fn write(&mut self, _iov: &[IoSlice<'_>]) -> Result<usize, LinkError> {
        Err(LinkError::Closed)
    }
    fn read(&mut self, _dst: &mut [u8]) -> Result<Option<usize>, LinkError> {
        Err(LinkError::Closed)
    }
    fn fd(&self) -> Option<BorrowedFd<'_>> {
        None
    }
    fn polled(&self) -> bool {
        true
    }
    fn arm_wakeup(&mut self) -> bool {
        true
    }
}

fn caps() -> Caps {
    Caps {
        latency_ns: 1,
        bandwidth: 1,
        max_frame: 1 << 30,
        reliable: true,
        ordered: true,
        node_local: false,
        relayed: false,
        raw: false,
        datagram: 0,
        single_copy: false,
    }
}

fn frame(len: usize) -> (HeaderBytes, Buffer) {
    let repr = DataRepr::Frag {
        recv_id: 1,
        offset: 0,
        len: len as u32,
    };
    (HeaderBytes::new(&repr), Buffer::owned(vec![7; len]))
}

#[test]
fn a_frame_whose_write_fails_stays_queued_for_the_failover() {
    // 100 bytes: the small frame written at once; 64 KiB: the queue's way.
    for (len, token) in [(100, 7), (64 << 10, 8)] {
        let mut link: StreamLink<Reset, u64> = StreamLink::new(Reset, caps(), 4096);
        let (header, payload) = frame(len);
        let sent = link.send(&header, Some((&payload, 0, len as u64)), token);
        assert!(sent.is_err(), "a reset connection takes nothing");
        assert!(link.tx_queued() > 0, "{len} bytes: the frame stays queued");
        let mut done = Vec::new();
        link.take_queued_tokens(&mut done);
        assert_eq!(done, [token], "{len} bytes: its send completes with the failover");
    }
}
