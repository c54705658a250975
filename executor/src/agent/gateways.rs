//! The executor's `--gateway` addresses, checked once at start.

/// The gateway addresses in `--gateway` (comma-separated replicas); `host:port` means TLS
/// (`https://`), as the server's gateway speaks it unless started with `--gateway-plaintext`. A malformed one is an error here, once, rather than in every
/// reconnection attempt.
pub(super) fn gateway_addresses(server: &str) -> anyhow::Result<Vec<String>> {
    let gateways: Vec<String> = server
        .split(',')
        .map(str::trim)
        .filter(|g| !g.is_empty())
        .map(|g| {
            if g.contains("://") {
                g.to_owned()
            } else {
                format!("https://{g}")
            }
        })
        .collect();
    anyhow::ensure!(!gateways.is_empty(), "no gateway address given (--gateway)");
    for gateway in &gateways {
        let valid = (gateway.starts_with("http://") || gateway.starts_with("https://"))
            && tonic::transport::Endpoint::from_shared(gateway.clone()).is_ok_and(|endpoint| {
                let uri = endpoint.uri();
                // A port, when given, is a number (`[::1]:7070`'s last colon is the port's).
                let port_ok = match uri.authority().map(|a| a.as_str().rsplit_once(':')) {
                    Some(Some((_, port))) if !port.ends_with(']') => port.parse::<u16>().is_ok(),
                    _ => true,
                };
                uri.host().is_some_and(|h| !h.is_empty()) && port_ok
            });
        anyhow::ensure!(
            valid,
            "--gateway `{gateway}` is not an address: give host:port or http(s)://host:port \
             (the server's executor gateway, by default on port 7070)"
        );
    }
    Ok(gateways)
}

#[cfg(test)]
#[test]
fn gateway_addresses_are_checked_once_at_start() {
    assert_eq!(
        gateway_addresses("10.0.0.1:7070, https://drover.example:7070, [::1]:7070, gw").unwrap(),
        [
            "https://10.0.0.1:7070",
            "https://drover.example:7070",
            "https://[::1]:7070",
            "https://gw"
        ]
    );
    for bad in [
        "",
        " , ",
        "exa mple:7070",
        "ftp://host:7070",
        "http://:7070",
        "host:port",
        "host:99999",
    ] {
        assert!(gateway_addresses(bad).is_err(), "{bad}");
    }
}
