//! A real web server for the tests that reach one: axum on a free
//! loopback port, on a runtime of its own so a test's blocking calls to
//! `skillbox` do not stall it.

use std::net::SocketAddr;

pub struct LocalSite {
    pub addr: SocketAddr,
    _runtime: tokio::runtime::Runtime,
}

impl LocalSite {
    /// Serves the router `app` makes; it is given the port, for routes
    /// that name the site itself (a redirect to another loopback address).
    pub fn serve(app: impl FnOnce(u16) -> axum::Router) -> LocalSite {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let addr = listener.local_addr().unwrap();
        let app = app(addr.port());
        runtime.spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        LocalSite {
            addr,
            _runtime: runtime,
        }
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }
}
