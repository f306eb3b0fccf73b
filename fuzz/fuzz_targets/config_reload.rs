//! Configuration parsing and reload planning. Input: two TOML texts separated
//! by a NUL byte. Neither parse may panic; when both parse, planning the reload
//! from the first to the second may not either, and a reload to the same
//! configuration changes nothing.
#![no_main]
use libfuzzer_sys::fuzz_target;
use nvmf_target::config::TargetConfig;
use nvmf_target::daemon::reload::plan;

fuzz_target!(|b: &[u8]| {
    let Ok(text) = std::str::from_utf8(b) else {
        return;
    };
    let (a, z) = text.split_once('\0').unwrap_or((text, text));
    let Ok(old) = TargetConfig::from_toml(a, "fuzz-a.toml") else {
        return;
    };
    if let Ok(same) = plan(&old, &old) {
        assert!(same.is_empty(), "reload to the same configuration: {}", same.summary());
    }
    if let Ok(new) = TargetConfig::from_toml(z, "fuzz-z.toml") {
        let _ = plan(&old, &new).map(|p| p.summary());
    }
});
