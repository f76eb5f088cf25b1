//! Argument validation (SPEC A5): whatever a gadget sends, staging either
//! refuses it or stores a JSON object of at most 64 KiB that renders.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(stored) = gatehouse::store::validate_args(text) {
        assert!(stored.len() <= gatehouse::store::MAX_ARGS_BYTES);
        let v: serde_json::Value = serde_json::from_str(&stored).expect("stored args are JSON");
        assert!(v.is_object());
        // Normalising twice changes nothing: what is shown is what is sent.
        assert_eq!(gatehouse::store::validate_args(&stored).ok().as_deref(), Some(stored.as_str()));
        let block = gatehouse::prompt::args_block(&stored);
        assert!(block.ends_with("```") || block.contains("(arguments cut"));
    }
});
