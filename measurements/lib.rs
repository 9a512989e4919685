//! Nothing but the measurements in `tests/`: see `Cargo.toml` for why they are a crate of their
//! own.
