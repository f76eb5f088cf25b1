//! Hearing other hosts: a connection that listens on one channel of the
//! shared database. It may not write.

use super::{DatabaseUrl, connect_raw, reason};
use tokio_postgres::Client;

/// A connection listening on one channel of the shared database: how a
/// host learns, without polling, that another host decided or finished an
/// action ([`super::actions::DECIDED`]). Notifications arrive only after
/// the transaction that sent them committed; one that rolled back is never
/// heard. Dropping the listener closes its connection.
pub(crate) struct Listener {
    heard: tokio::sync::mpsc::UnboundedReceiver<String>,
    _client: Client,
}

impl Listener {
    /// Listen on `channel` of the database at `url`.
    pub async fn open(url: &DatabaseUrl, channel: &str) -> anyhow::Result<Listener> {
        let (client, mut connection) = connect_raw(url).await?;
        let (tell, heard) = tokio::sync::mpsc::unbounded_channel();
        // The driver hands notifications to whoever polls the connection:
        // this task polls it, and passes each payload on.
        tokio::spawn(async move {
            while let Some(message) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
                match message {
                    Ok(tokio_postgres::AsyncMessage::Notification(n)) => {
                        if tell.send(n.payload().to_owned()).is_err() {
                            return;
                        }
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(error = %reason(&e), "a listening connection ended");
                        return;
                    }
                }
            }
        });
        // A channel name is an identifier: quoted, so no text of ours is
        // ever read as SQL.
        client
            .batch_execute(&format!("LISTEN \"{}\"", channel.replace('"', "\"\"")))
            .await
            .map_err(|e| anyhow::anyhow!("cannot listen on {url} ({})", reason(&e)))?;
        Ok(Listener {
            heard,
            _client: client,
        })
    }

    /// The next payload heard; `None` once the connection ended.
    pub async fn next(&mut self) -> Option<String> {
        self.heard.recv().await
    }
}
