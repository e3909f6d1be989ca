//! Service addresses as the binaries and clients take them: `HOST:PORT`,
//! and lists of them (`HOST:PORT,HOST:PORT`) for several oms.

/// An address, or a list of them, that is not of the expected form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("om address `{address}` {why}")]
pub struct AddressError {
    /// The address as given.
    pub address: String,
    /// What is wrong with it (for a malformed one, with the form expected).
    pub why: String,
}

/// The form every address takes, for error messages.
const EXPECTED: &str = "expected HOST:PORT, e.g. 127.0.0.1:9862";

/// Checks that `address` is `HOST:PORT`: no scheme or path (which would
/// otherwise mean a DNS lookup of `http`), a host, a port from 1 to 65535,
/// an IPv6 host in brackets (`[::1]:9862`).
///
/// # Errors
/// [`AddressError`] naming the address and what is wrong.
pub fn check_host_port(address: &str) -> Result<(), AddressError> {
    let bad = |why: &str| AddressError {
        address: address.to_string(),
        why: format!("{why}: {EXPECTED}"),
    };
    if address.contains("://") || address.contains('/') {
        return Err(bad("has a scheme or a path"));
    }
    let Some((host, port)) = address.rsplit_once(':') else {
        return Err(bad("has no port"));
    };
    if host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .is_empty()
    {
        return Err(bad("has no host"));
    }
    if host.contains(':') && !(host.starts_with('[') && host.ends_with(']')) {
        return Err(bad("has an IPv6 host outside brackets ([::1]:9862)"));
    }
    match port.parse::<u16>() {
        Ok(p) if p > 0 => Ok(()),
        _ => Err(bad("has no valid port")),
    }
}

/// The addresses in `list`: comma-separated `HOST:PORT`s (spaces around
/// each ignored), at least one, none twice.
///
/// # Errors
/// [`AddressError`] for the first malformed or repeated address.
pub fn parse_list(list: &str) -> Result<Vec<String>, AddressError> {
    let mut out: Vec<String> = Vec::new();
    for address in list.split(',').map(str::trim) {
        check_host_port(address)?;
        if out.iter().any(|a| a == address) {
            return Err(AddressError {
                address: address.to_string(),
                why: "is listed twice".to_string(),
            });
        }
        out.push(address.to_string());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_must_be_host_and_port() {
        for ok in ["127.0.0.1:9862", "localhost:1", "[::1]:9862"] {
            assert!(check_host_port(ok).is_ok(), "{ok}");
        }
        for bad in [
            "127.0.0.1",
            "http://127.0.0.1:9862",
            "127.0.0.1:0",
            ":9862",
            "h:port",
            "h:99999",
            "::1:9862",
        ] {
            let e = check_host_port(bad).expect_err(bad);
            assert!(e.to_string().contains("expected HOST:PORT"), "{e}");
        }
    }

    #[test]
    fn lists_are_comma_separated_without_repeats() {
        assert_eq!(
            parse_list("a:1, b:2").expect("list"),
            ["a:1".to_string(), "b:2".to_string()]
        );
        for bad in ["", "a:1,", "a:1,b"] {
            let e = parse_list(bad).expect_err(bad);
            assert!(e.to_string().contains(EXPECTED), "{e}");
        }
        let e = parse_list("a:1,a:1").expect_err("repeat");
        assert_eq!(e.to_string(), "om address `a:1` is listed twice");
    }
}
