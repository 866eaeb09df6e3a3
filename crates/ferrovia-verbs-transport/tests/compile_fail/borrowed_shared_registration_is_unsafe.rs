// `register_shared_slice` is unsafe: its caller promises to leak no handle.
use ferrovia_mr::RegisterOptions;

fn main() {
    let ch: ferrovia_channel::Channel = ferrovia_verbs_transport::VerbsBuilder::default().build().unwrap();
    let mut memory = vec![0u8; 8];
    let slice = ch
        .registry()
        .register_shared_slice(&mut memory, RegisterOptions::local().allow_remote_write())
        .unwrap();
    drop(slice);
}
