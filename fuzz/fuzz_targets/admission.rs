//! Component admission (SPEC X3): any bytes given to `install`, `gatekeeper
//! add` or `import` are refused in one line or admitted; never a crash.
#![no_main]

use gatehouse::embed::{Limits, Role, Runtime};
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

fn runtime() -> &'static Runtime {
    static RT: OnceLock<(tempfile_free::Dir, Runtime)> = OnceLock::new();
    &RT.get_or_init(|| {
        let dir = tempfile_free::Dir::new();
        let limits = Limits {
            pooling: false,
            ..Limits::default()
        };
        let rt = Runtime::new(dir.0.clone(), limits).expect("a runtime");
        (dir, rt)
    })
    .1
}

/// A scratch directory for the compiled-component cache, without a
/// dependency: removed when the process ends normally.
mod tempfile_free {
    pub struct Dir(pub std::path::PathBuf);
    impl Dir {
        pub fn new() -> Dir {
            let p = std::env::temp_dir().join(format!("gatehouse-fuzz-{}", std::process::id()));
            std::fs::create_dir_all(&p).expect("a scratch directory");
            Dir(p)
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    // The iterative nesting walk alone, on everything.
    let _ = gatehouse::embed::check_nesting(data);
    for role in [Role::Gadget, Role::Gatekeeper] {
        if let Err(e) = runtime().admit(data, role, &|_| {}) {
            let line = format!("{e:#}");
            assert!(!line.contains('\n'), "a multi-line refusal: {line}");
        }
    }
});
