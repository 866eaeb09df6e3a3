// Memory a peer may write is never a `&mut [u8]` either (the compiler
// would assume nothing else writes it); the owner writes it with
// `write_from` or `store_u64`.
use ferrovia_channel::Channel;
use ferrovia_mr::RegisterOptions;

fn main() {
    let ch: Channel = ferrovia_verbs_transport::VerbsBuilder::default().build().unwrap();
    let mut inbox = ch
        .registry()
        .alloc(64, RegisterOptions::local().allow_remote_atomic())
        .unwrap();
    inbox[0] = 1;
}
