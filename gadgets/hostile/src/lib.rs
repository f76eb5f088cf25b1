//! `hostile`: a misbehaving gadget, a test fixture only. Its input picks the
//! misbehaviour: `spin` (loop forever), `balloon` (eat memory without
//! bound), `probe` (look for files, environment and sockets, and report what
//! it found as JSON) or `print` (write to stdout and stderr).

wit_bindgen::generate!({ world: "gadget", path: "../../wit" });

use serde_json::json;
use std::hint::black_box;

struct Hostile;

impl exports::gatehouse::os::run::Guest for Hostile {
    fn run(input: String) -> Result<String, String> {
        match input.trim() {
            "spin" => spin(),
            "balloon" => balloon(),
            "probe" => Ok(probe()),
            "print" => {
                println!("hello from hostile");
                eprintln!("hello from hostile");
                Ok("printed \"hello from hostile\" to stdout and stderr".to_string())
            }
            other => Err(format!(
                "unknown misbehaviour {other:?}; expected spin, balloon, probe or print"
            )),
        }
    }
}

export!(Hostile);

/// Loops forever; `black_box` keeps the optimizer from removing the loop.
fn spin() -> ! {
    let mut counter = 0u64;
    loop {
        counter = black_box(counter.wrapping_add(1));
    }
}

/// Allocates 1 MiB blocks, writing every byte, until the allocator fails.
fn balloon() -> ! {
    let mut hoard: Vec<Vec<u8>> = Vec::new();
    loop {
        let mut block = vec![0u8; 1 << 20];
        block.fill(0xA5);
        hoard.push(black_box(block));
        black_box(&hoard);
    }
}

/// Tries every ambient authority std offers and reports what happened.
fn probe() -> String {
    let file = match std::fs::read_to_string("/etc/passwd") {
        Ok(content) => format!("read /etc/passwd: {content}"),
        Err(e) => format!("error: {e}"),
    };
    let dir = match std::fs::read_dir("/") {
        Ok(entries) => json!(
            entries
                .map(|entry| match entry {
                    Ok(entry) => entry.path().display().to_string(),
                    Err(e) => format!("error: {e}"),
                })
                .collect::<Vec<_>>()
        ),
        Err(e) => json!(format!("error: {e}")),
    };
    let env: Vec<String> = std::env::vars().map(|(k, v)| format!("{k}={v}")).collect();
    let socket = match std::net::TcpStream::connect("127.0.0.1:1") {
        Ok(stream) => format!(
            "connected to 127.0.0.1:1 (local address {:?})",
            stream.local_addr().ok()
        ),
        Err(e) => format!("error: {e}"),
    };
    json!({ "file": file, "dir": dir, "env": env, "socket": socket }).to_string()
}
