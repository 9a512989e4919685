#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| redefer::fuzz::activity_decoding(data));
