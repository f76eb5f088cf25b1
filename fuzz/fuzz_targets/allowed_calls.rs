//! The allowed-calls parser (SPEC G4): a gadget's list is refused with a
//! reason or parsed, and a parsed list survives storing and reading back.
#![no_main]

use gatehouse::grants;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(list) = grants::parse_allowed(text) {
        let stored = grants::allowed_to_json(&list).to_string();
        let back = grants::allowed_from_stored(&stored).expect("a stored list reads back");
        assert_eq!(back.len(), list.len());
        for (_, rule) in &back {
            let _ = format!("{rule:?}");
        }
    }
});
