//! What a host sends before it has proven anything: the PSK identity of its
//! ClientHello, as the target reads it and looks its key up: never a panic; an
//! identity read back prints as it came; a key in the interchange format reads
//! back as written.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tlspsk::{ConfiguredPsk, Derivation, Identity, PskHash};

fuzz_target!(|b: &[u8]| {
    if let Ok(id) = Identity::parse(b) {
        assert_eq!(id.to_string().as_bytes(), b);
        let psk = ConfiguredPsk::new(Some(PskHash::Sha256), &[7; 32]).unwrap();
        let _ = psk.server_psk(&id, &Derivation::ALL);
    }
    if let Ok(s) = std::str::from_utf8(b) {
        if let Ok(k) = ConfiguredPsk::parse(s) {
            assert_eq!(ConfiguredPsk::parse(&k.to_interchange()).unwrap(), k);
        }
    }
});
