#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| xfer_fuzz_targets::copy_fields(data));
