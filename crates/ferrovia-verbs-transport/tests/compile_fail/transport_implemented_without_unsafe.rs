// The scoped core ends borrows on its transport's word (completions and
// flushes), so implementing `Transport` is unsafe.
use std::time::Duration;

use ferrovia_channel::{TransportResult};
use ferrovia_channel::transport::{Completion, RecvOp, SendOp, Transport};

struct Liar;

impl Transport for Liar {
    fn peers(&self) -> usize {
        1
    }
    fn send_depth(&self, _: usize) -> u32 {
        1
    }
    fn recv_depth(&self, _: usize) -> u32 {
        1
    }
    fn max_inline(&self, _: usize) -> u32 {
        0
    }
    unsafe fn post_send(&self, _: usize, _: &[SendOp]) -> TransportResult<()> {
        Ok(())
    }
    unsafe fn post_recv(&self, _: usize, _: &[RecvOp]) -> TransportResult<()> {
        Ok(())
    }
    fn poll(&self, _: &mut [Completion]) -> TransportResult<usize> {
        Ok(0)
    }
    fn wait(&self, _: &mut [Completion], _: Duration) -> TransportResult<usize> {
        Ok(0)
    }
    fn flush(&self, _: usize) -> TransportResult<()> {
        Ok(())
    }
}

fn main() {
    let _ = Liar;
}
