//! Scoped channel core of ferrovia.
//!
//! Contract (filled in by the channel work): work requests borrow their
//! buffers for `'env`; `Channel::scope` returns only after every request
//! posted inside it has completed or been flushed, so the NIC never touches
//! a buffer after its borrow ends; `MultiChannel` connects many peers over
//! one protection domain.
