//! Ports for the processes the harness starts: picked free, below the kernel's ephemeral range.

/// A port for a process to listen on later, free when returned. Taken below Linux's ephemeral range
/// (32768-60999), where the kernel picks the port of every `bind(0)` and every outgoing connection:
/// a port found free there could be taken by a Postgres or HTTP client before the server binds it
/// (a test failed with "Address already in use" that way). Ports go in turn from a start that
/// differs per process, so tests running at once do not pick the same one.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    const FIRST: u16 = 20_000;
    const COUNT: u16 = 12_000;
    static NEXT: AtomicU16 = AtomicU16::new(0);
    let start = (std::process::id() % u32::from(COUNT)) as u16;
    for _ in 0..COUNT {
        let n = NEXT.fetch_add(1, Ordering::Relaxed) % COUNT;
        let port = FIRST + (start + n) % COUNT;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in {FIRST}-{}", FIRST + COUNT - 1)
}
