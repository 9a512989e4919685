#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| redefer::fuzz::claim_reply_decoding(data));
