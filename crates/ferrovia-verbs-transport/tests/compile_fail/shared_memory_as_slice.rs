// Memory a peer may write is never a `&[u8]`: the optimizer may assume a
// shared reference's bytes do not change, so a release build spinning on
// one can read a stale value forever.
use ferrovia_channel::Channel;
use ferrovia_mr::RegisterOptions;

fn spin(plain: &[u8]) -> u8 {
    plain[0]
}

fn main() {
    let ch: Channel = ferrovia_verbs_transport::VerbsBuilder::default().build().unwrap();
    let inbox = ch
        .registry()
        .alloc(64, RegisterOptions::local().allow_remote_write())
        .unwrap();
    let plain: &[u8] = &inbox;
    spin(plain);
}
