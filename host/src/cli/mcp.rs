//! The `mcp` commands' words: `gatehouse mcp serve`, the MCP surface
//! (`crate::mcp_serve`) started over stdio or loopback HTTP. Every rule is
//! the kernel's; this module only starts, prints and stops.

use crate::kernel::Kernel;
use crate::mcp_serve::{self, Gate};
use clap::Subcommand;

#[derive(Subcommand, Debug)]
pub enum McpCmd {
    /// Offer the tools introduced into CHAT to an MCP client (an external
    /// agent), acting for you (`--as`). Reads run at once; writes are held
    /// for a person and answer `pending #N`. Over stdio by default (stdout
    /// carries only JSON-RPC); with --http, Streamable HTTP on loopback
    /// behind a bearer token printed once.
    Serve {
        #[arg(long)]
        chat: String,
        /// Listen on this loopback address instead of stdio, like
        /// 127.0.0.1:8338; port 0 picks a free one. The URL is printed.
        #[arg(long, value_name = "127.0.0.1:PORT")]
        http: Option<String>,
    },
}

pub async fn execute(kernel: &Kernel, cmd: McpCmd, me: &str) -> anyhow::Result<bool> {
    match cmd {
        McpCmd::Serve { chat, http } => {
            // Check the address before anything else: a usage mistake
            // never opens a chat.
            let addr = http
                .as_deref()
                .map(mcp_serve::parse_http_addr)
                .transpose()?;
            let gate = Gate::open(kernel.clone(), &chat, me).await?;
            match addr {
                None => {
                    tracing::info!(chat = %chat, person = %me, "serving MCP over stdio");
                    let stop = async {
                        tokio::select! {
                            _ = super::web::shutdown_signal() => {}
                            _ = kernel.state_vanished() => tracing::warn!(
                                "the state database was removed or replaced; the MCP server stops"
                            ),
                        }
                    };
                    mcp_serve::serve_stdio(gate, stop).await?;
                }
                Some(addr) => {
                    let mut server = mcp_serve::start_http(gate, addr).await?;
                    {
                        // Shown once, and nowhere else: whoever started the
                        // server hands it to their MCP client.
                        use std::io::Write as _;
                        let mut out = std::io::stdout().lock();
                        let _ = writeln!(
                            out,
                            "serving chat {chat} over MCP at {} (Ctrl-C stops)",
                            server.url()
                        );
                        let _ = writeln!(out, "bearer token (shown once): {}", server.token());
                        let _ = out.flush();
                    }
                    let failed = tokio::select! {
                        r = server.finished() => Some(r),
                        _ = super::web::shutdown_signal() => None,
                        _ = kernel.state_vanished() => Some(Err(anyhow::anyhow!(
                            "the state database {} was removed or replaced while serving; the MCP server stopped",
                            kernel.state_location()
                        ))),
                    };
                    server.stop().await;
                    if let Some(r) = failed {
                        r?;
                    }
                }
            }
        }
    }
    Ok(true)
}
