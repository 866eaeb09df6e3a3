//! Multi-peer `Node` for ferrovia.
//!
//! Contract (filled in by the node work): a `Node` knows its rank and the
//! world size, bootstraps through torchrun, Slurm, Open MPI/PMIx or an
//! explicit config, connects one channel per peer, and offers a barrier with
//! a deadline that names the ranks that did not arrive.
#![forbid(unsafe_code)]
