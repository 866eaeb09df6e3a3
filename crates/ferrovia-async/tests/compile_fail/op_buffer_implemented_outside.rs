// The engine hands back exactly the buffer it was given: what an
// operation may own is sealed.
use ferrovia_async::OpBuffer;
use ferrovia_channel::OwnedBuf;

struct Mine;

impl OpBuffer for Mine {
    fn len(&self) -> usize {
        0
    }
    fn into_owned(self) -> OwnedBuf {
        panic!("never called: the impl itself must not compile")
    }
    fn from_owned(_: OwnedBuf) -> Option<Self> {
        None
    }
}

fn main() {}
