//! What a failed gRPC call's error says about whether the request left.

/// Whether `err` (a call's `tonic::Status`, or a transport error) says the
/// request never left: no connection could be made. tonic's connector wraps
/// every failure to make one (refused, timed out, a failed TLS handshake)
/// in a `ConnectError` kept among the sources, and a request is only written
/// to a connection that was made; a refused connection is recognised by its
/// I/O error too. Any call, a change included, is safe to send again then.
/// Other I/O errors may come from a connection the request already went out
/// on, so they do not count.
#[must_use]
pub fn never_sent(err: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(err);
    while let Some(e) = source {
        if e.is::<tonic::ConnectError>() {
            return true;
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            return io.kind() == std::io::ErrorKind::ConnectionRefused;
        }
        source = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Error, ErrorKind};
    use std::sync::Arc;

    #[test]
    fn only_a_connection_never_made_counts() {
        let mut connect = tonic::Status::unavailable("tcp connect error");
        let timed_out = Error::from(ErrorKind::TimedOut);
        connect.set_source(Arc::new(tonic::ConnectError(Box::new(timed_out))));
        assert!(never_sent(&connect));
        let refused =
            tonic::Status::from_error(Box::new(Error::from(ErrorKind::ConnectionRefused)));
        assert!(never_sent(&refused));
        let reset = tonic::Status::from_error(Box::new(Error::from(ErrorKind::ConnectionReset)));
        assert!(!never_sent(&reset));
        assert!(!never_sent(&tonic::Status::unavailable("no source")));
    }
}
