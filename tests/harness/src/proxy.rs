//! A TCP proxy in front of the API server that a test cuts and restores, to
//! play an outage between a client and the server.
//!
//! ```text
//!  client ──▶ ApiProxy (127.0.0.1:free port) ──▶ API server
//!             cut():     every connection closed; new ones accepted and
//!                        closed at once (the TLS handshake fails)
//!             restore(): connections relayed again
//! ```
//!
//! TLS passes through untouched: the server's certificate is for
//! 127.0.0.1, where the proxy listens too, so a kubeconfig needs only its
//! `server` changed ([`ApiProxy::kubeconfig`]).

use std::net::SocketAddr;

use anyhow::{Context, Result};
use kube::config::Kubeconfig;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A running proxy; it stops, closing every connection, when dropped.
pub struct ApiProxy {
    address: SocketAddr,
    /// Whether traffic passes.
    open: watch::Sender<bool>,
    task: JoinHandle<()>,
}

// === impl ApiProxy ===

impl ApiProxy {
    /// Listens on a free port of 127.0.0.1 and relays every connection to
    /// `upstream`, an `https://host:port` URL (the API server's).
    pub async fn start(upstream: &str) -> Result<Self> {
        let authority = upstream
            .strip_prefix("https://")
            .unwrap_or(upstream)
            .trim_end_matches('/');
        let upstream: SocketAddr = tokio::net::lookup_host(authority)
            .await
            .with_context(|| format!("resolving {authority}"))?
            .next()
            .with_context(|| format!("{authority} resolves to no address"))?;
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .context("binding the proxy")?;
        let address = listener.local_addr()?;
        let (open, receiver) = watch::channel(true);
        let task = tokio::spawn(accept(listener, upstream, receiver));
        Ok(Self {
            address,
            open,
            task,
        })
    }

    /// Where the proxy listens.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The proxy as an API server URL.
    pub fn url(&self) -> String {
        format!("https://{}", self.address)
    }

    /// `kubeconfig` with every cluster's server pointed at the proxy.
    pub fn kubeconfig(&self, kubeconfig: &Kubeconfig) -> Kubeconfig {
        let mut kubeconfig = kubeconfig.clone();
        for cluster in &mut kubeconfig.clusters {
            if let Some(cluster) = cluster.cluster.as_mut() {
                cluster.server = Some(self.url());
            }
        }
        kubeconfig
    }

    /// Closes every connection and closes new ones as they come, until
    /// [`ApiProxy::restore`].
    pub fn cut(&self) {
        self.open.send_replace(false);
    }

    /// Relays connections again.
    pub fn restore(&self) {
        self.open.send_replace(true);
    }
}

impl Drop for ApiProxy {
    fn drop(&mut self) {
        self.task.abort();
        // The relays end when `open` (the sender) is dropped.
    }
}

/// Accepts connections until the proxy is dropped.
async fn accept(listener: TcpListener, upstream: SocketAddr, open: watch::Receiver<bool>) {
    loop {
        let Ok((inbound, _)) = listener.accept().await else {
            // Out of file descriptors, say: try again a little later.
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            continue;
        };
        if *open.borrow() {
            tokio::spawn(relay(inbound, upstream, open.clone()));
        }
        // Cut: `inbound` is dropped, closing the connection.
    }
}

/// Copies both ways until either side closes or the proxy is cut.
async fn relay(mut inbound: TcpStream, upstream: SocketAddr, mut open: watch::Receiver<bool>) {
    let Ok(mut outbound) = TcpStream::connect(upstream).await else {
        return;
    };
    tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound) => {}
        _ = open.wait_for(|open| !*open) => {}
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// Sends `ping` through the proxy; what came back (empty when closed).
    async fn ping(proxy: &ApiProxy) -> Vec<u8> {
        let mut stream = TcpStream::connect(proxy.address()).await.expect("connects");
        let _ = stream.write_all(b"ping").await;
        let mut reply = vec![0; 4];
        match stream.read_exact(&mut reply).await {
            Ok(_) => reply,
            Err(_) => Vec::new(),
        }
    }

    #[tokio::test]
    async fn relays_until_cut_and_again_once_restored() {
        let echo = TcpListener::bind("127.0.0.1:0").await.expect("binds");
        let upstream = format!("https://{}", echo.local_addr().expect("bound"));
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = echo.accept().await {
                tokio::spawn(async move {
                    let mut buffer = [0; 4];
                    while stream.read_exact(&mut buffer).await.is_ok() {
                        let _ = stream.write_all(&buffer).await;
                    }
                });
            }
        });
        let proxy = ApiProxy::start(&upstream).await.expect("starts");
        assert_eq!(ping(&proxy).await, b"ping");
        let mut held = TcpStream::connect(proxy.address()).await.expect("connects");
        held.write_all(b"ping").await.expect("writes");
        let mut reply = [0; 4];
        held.read_exact(&mut reply).await.expect("echoed");

        proxy.cut();
        assert_eq!(ping(&proxy).await, b"");
        // The connection open before the cut is closed too.
        let _ = held.write_all(b"ping").await;
        assert!(held.read_exact(&mut reply).await.is_err());

        proxy.restore();
        assert_eq!(ping(&proxy).await, b"ping");
    }
}
