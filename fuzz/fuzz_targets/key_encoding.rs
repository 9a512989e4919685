#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| redefer::fuzz::key_encoding(data));
