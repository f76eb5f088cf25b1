//! The Extism round trip: plugin (`run`) -> host function -> plugin
//! (`echo`) -> back, both plugins live, as Gatehouse's "read, one from the
//! host" is timed with live instances. Prints the median microseconds per
//! round trip over `ROUNDS` rounds of 200 calls, and one line
//! `EXTISM_ROUND_TRIP_US <value>` for `fast_path` to read.
//!
//! Usage: extism-peer GADGET.wasm GATEKEEPER.wasm [ROUNDS]

use extism::{Manifest, Plugin, PluginBuilder, PTR, UserData, Wasm, host_fn};
use std::time::Instant;

host_fn!(gatekeeper_call(gatekeeper: Plugin; input: String) -> String {
    let gatekeeper = gatekeeper.get()?;
    let mut gatekeeper = gatekeeper.lock().map_err(|_| extism::Error::msg("poisoned"))?;
    let out: String = gatekeeper.call("echo", input)?;
    Ok(out)
});

fn main() -> Result<(), extism::Error> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(gadget), Some(gatekeeper)) = (args.get(1), args.get(2)) else {
        return Err(extism::Error::msg("usage: extism-peer GADGET.wasm GATEKEEPER.wasm [ROUNDS]"));
    };
    let rounds: usize = args.get(3).and_then(|r| r.parse().ok()).unwrap_or(15);
    // Handed over as bytes: the crate is built without its file-based
    // loading (`register-filesystem`), which these pins leave out.
    let gatekeeper = Plugin::new(Manifest::new([Wasm::data(std::fs::read(gatekeeper)?)]), [], false)?;
    let mut gadget = PluginBuilder::new(Manifest::new([Wasm::data(std::fs::read(gadget)?)]))
        .with_wasi(false)
        .with_function(
            "gatekeeper_call",
            [PTR],
            [PTR],
            UserData::new(gatekeeper),
            gatekeeper_call,
        )
        .build()?;
    let input = r#"{"n":1}"#;
    let out: String = gadget.call("run", input)?;
    assert_eq!(out, input);
    let mut samples = Vec::new();
    for _ in 0..rounds {
        let t = Instant::now();
        for _ in 0..200 {
            let _: String = gadget.call("run", input)?;
        }
        samples.push(t.elapsed().as_secs_f64() / 200.0);
    }
    samples.sort_by(f64::total_cmp);
    let median = samples[samples.len() / 2] * 1e6;
    println!("EXTISM_ROUND_TRIP_US {median:.2}");
    Ok(())
}
