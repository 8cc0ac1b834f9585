//! Connection-level limits against hostile and careless clients, over real loopback sockets.

use std::net::TcpStream;
use std::time::Duration;

#[test]
fn a_burst_of_connections_waits_in_the_listen_queue_rather_than_being_dropped() {
    // 500 clients connecting at once to a server busy elsewhere (never accepting here): each
    // handshake completes into the kernel's queue. With the default backlog of 128, the
    // 130th would be dropped and its client left retransmitting.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let listeners = runtime
        .block_on(tierdb::server::Listeners::bind(
            "127.0.0.1:0".parse().unwrap(),
            "127.0.0.1:0".parse().unwrap(),
        ))
        .unwrap();
    let (http, graphite, _) = listeners.addrs().unwrap();
    for addr in [http, graphite] {
        let queued: Vec<TcpStream> = (0..500)
            .map(|i| {
                TcpStream::connect_timeout(&addr, Duration::from_secs(3))
                    .unwrap_or_else(|e| panic!("connection {i} to {addr}: {e}"))
            })
            .collect();
        assert_eq!(queued.len(), 500);
    }
}
