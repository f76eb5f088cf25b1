//! The key the deployment's secrets are sealed with: `key new`
//! prints a fresh one, `key show` names the one this host was given, `key
//! rotate` seals every secret again under another. Words only: sealing is
//! `crate::seal`'s, and which values are sealed is the store's.

use super::print_record;
use crate::kernel::Kernel;
use crate::seal::Key;
use clap::Subcommand;
use std::path::PathBuf;

#[derive(Subcommand, Debug)]
pub(super) enum KeyCmd {
    /// Print a fresh random key (base64, one line): `gatehouse key new >
    /// FILE`, `chmod 600 FILE`, then give it with GATEHOUSE_KEY_FILE=FILE.
    /// Needs no home and no database.
    New,
    /// Show the id of the key this host was given and where it came from
    /// (never the key itself).
    Show {
        #[arg(long)]
        json: bool,
    },
    /// Seal every secret again with the key in FILE, in one transaction,
    /// then use that key: give it to every host (GATEHOUSE_KEY_FILE=FILE).
    /// The old key opens nothing afterwards; stop the other hosts first.
    /// A home's own key file, if that was the old key, is removed.
    Rotate {
        /// The new key's file (made with `gatehouse key new`).
        #[arg(long, value_name = "FILE")]
        new_key_file: PathBuf,
        #[arg(long)]
        json: bool,
    },
}

/// `key new`: no home, no kernel.
pub(super) fn new_key() -> anyhow::Result<bool> {
    let key = Key::generate()?;
    outln!("{}", key.encoded().as_str());
    Ok(true)
}

/// `key show` and `key rotate`, with the kernel open on the current key.
pub(super) async fn execute(kernel: &Kernel, cmd: KeyCmd) -> anyhow::Result<bool> {
    match cmd {
        KeyCmd::New => new_key(),
        KeyCmd::Show { json } => {
            let shown = kernel.operator().sealing_key();
            print_record(&shown, json, |k| {
                outln!("secrets are sealed with key {} ({})", k.id, k.origin);
            })?;
            Ok(true)
        }
        KeyCmd::Rotate { new_key_file, json } => {
            let new = Key::from_file(&new_key_file)?;
            let rotated = kernel.operator().rotate_key(new).await?;
            print_record(&rotated, json, |r| {
                outln!(
                    "sealed {} secret(s) again with key {} (was {}); give every host GATEHOUSE_KEY_FILE={} from now on",
                    r.sealed,
                    r.now,
                    r.was,
                    new_key_file.display()
                );
                if let Some(removed) = &r.removed {
                    outln!("removed the home's own key file {removed}: it opens nothing now");
                }
            })?;
            Ok(true)
        }
    }
}
