#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| skillbox::unstable::fuzz::skill_md(data));
