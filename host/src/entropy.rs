//! Fresh randomness from the operating system, for tokens the host mints
//! (process owners, hook and share tokens, deployment secrets).
//!
//! A leaf: it depends on no other module, so the store and the kernel can
//! both mint tokens without importing each other.

/// `n` bytes from the operating system's generator, hex-encoded: process
/// tokens and share links.
pub fn random_hex(n: usize) -> anyhow::Result<String> {
    let mut bytes = vec![0u8; n];
    getrandom::fill(&mut bytes)
        .map_err(|e| anyhow::anyhow!("the system's random generator failed: {e}"))?;
    Ok(hex::encode(bytes))
}
