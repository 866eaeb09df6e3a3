// Borrowed memory peers may write is registered only through `unsafe`
// (`register_shared_slice`): a leaked handle would end the borrow while
// peers can still write the memory. `register_slice` takes Local options.
use ferrovia_mr::RegisterOptions;

fn main() {
    let ch: ferrovia_channel::Channel = ferrovia_verbs_transport::VerbsBuilder::default().build().unwrap();
    let mut memory = vec![0u8; 8];
    let slice = ch
        .registry()
        .register_slice(&mut memory, RegisterOptions::local().allow_remote_write())
        .unwrap();
    std::mem::forget(slice);
    drop(memory);
}
