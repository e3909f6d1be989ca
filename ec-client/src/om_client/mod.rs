//! Typed calls to the om over gRPC, each bounded by the om deadline.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use proto_crate::request_id;
use proto_crate::wire::om::ozone_manager_service_client::OzoneManagerServiceClient;
use proto_crate::{KeyInfo, OmErrorCode, PartInfo, ProtocolError, WriteCondition};
use tonic::Status;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

use crate::session::{OpenedKey, SessionGrant, Undo, guarded, open_guarded};
use crate::{ClientError, Result};

mod namespace;
mod writes;

/// The om's gRPC client stub, with the request id attached to every call.
type Stub = OzoneManagerServiceClient<InterceptedService<Channel, request_id::Attach>>;

/// A connected om client (Ozone's `OzoneManagerProtocolClientSideTranslatorPB`,
/// reduced) over one or more om addresses, with failover between them as
/// Ozone's `OMFailoverProxyProvider` does: calls go to the om that last
/// answered, and move on to the next address in the list when a call could
/// not reach it (see [`Resend`]).
#[derive(Debug, Clone)]
pub(crate) struct OmClient {
    /// One stub per om address, in the order given. Every call carries the
    /// current request id ([`request_id::attach`]).
    oms: Arc<[(String, Stub)]>,
    /// Index into `oms` of the om calls go to first: the last one that
    /// answered. Shared by clones.
    current: Arc<AtomicUsize>,
    timeout: Duration,
    /// Random per connected client: the om bounds the sessions one client
    /// holds open by this id.
    client_id: String,
}

/// When a failed call is sent again to the next om address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resend {
    /// A read (or a token mint): after any failure that is not an om's
    /// answer (see [`OmErrorCode::Unavailable`]), since sending it twice
    /// changes nothing.
    Read,
    /// A change whose repeat leaves what callers see as one would: after any
    /// failure that is not an om's answer, as a read, but never hedged.
    /// AllocateBlockGroup (a group allocated by a lost answer is never used,
    /// and is reclaimed when the session ends), RenewKey, AbortKey.
    Repeatable,
    /// A change: only when no connection could be made, so the call never
    /// left; after a failure mid-call the om may have applied it, and the
    /// caller sees the error.
    IfNotSent,
    /// A writer's commit (CommitKey, CommitPart): resent only when it never
    /// left, as [`Resend::IfNotSent`], but round after round with pauses
    /// until the deadline, as [`Resend::Repeatable`]: a close rides out an om
    /// restart.
    Commit,
}

impl Resend {
    /// Whether the call goes round the oms again, with pauses, until its
    /// deadline once every om has failed (a writer holding data waits for its
    /// om rather than failing the write).
    fn waits(self) -> bool {
        matches!(self, Self::Repeatable | Self::Commit)
    }
}

/// Whether `status` says the call never reached the om: no connection
/// could be made ([`proto_crate::transport::never_sent`]).
fn not_sent(status: &Status) -> bool {
    proto_crate::transport::never_sent(status)
}

/// Whether a call that failed with `status` goes to the next om: one that
/// never left, one an om refused because it does not lead its metadata
/// store ([`OmErrorCode::NotLeader`]: nothing was applied), or a read that
/// got no answer (a transport failure without an om error code:
/// `UNAVAILABLE`, or a connection lost mid-call, which tonic reports as
/// `UNKNOWN` or `CANCELLED`).
fn resend(status: &Status, how: Resend) -> bool {
    not_sent(status)
        || OmErrorCode::of(status) == OmErrorCode::NotLeader
        || (matches!(how, Resend::Read | Resend::Repeatable)
            && OmErrorCode::of(status) == OmErrorCode::Unavailable)
}

/// Passes over the oms a call may make before it fails (or, for a call that
/// [`waits`](Resend::waits), before it pauses): every om once, then once
/// more, so that a read whose connection an om's restart broke (the channel
/// reconnects on the next call) costs one resend, not the call. A change
/// ([`Resend::IfNotSent`], [`Resend::Commit`]) is resent only when it never
/// left.
const ROUNDS: usize = 2;

/// First pause before a call that [`waits`](Resend::waits) (a writer's
/// session calls and its commit) goes round the oms again after every om
/// failed; it doubles up to [`RETRY_PAUSE_MAX`], until the call's deadline.
/// A writer thereby rides out an om restart (its sessions survive it)
/// instead of failing the write.
const RETRY_PAUSE_MIN: Duration = Duration::from_millis(100);
/// Longest pause between rounds of a call that [`waits`](Resend::waits).
const RETRY_PAUSE_MAX: Duration = Duration::from_secs(1);

/// How a writer's om session ends.
#[derive(Debug, Clone)]
pub(crate) enum Commit {
    /// As a key, with object metadata, provided the condition (if any) holds.
    Key(BTreeMap<String, String>, Option<WriteCondition>),
    /// As a part of a multipart upload, with the part's ETag and metadata.
    Part {
        /// Hex MD5 of the part's bytes.
        etag: String,
        /// Part metadata.
        metadata: BTreeMap<String, String>,
    },
}

/// What a writer committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Committed {
    /// A key, now visible.
    Key(KeyInfo),
    /// A part of a multipart upload.
    Part(PartInfo),
}

impl Committed {
    /// The key, or an error if a part was committed.
    pub(crate) fn into_key(self) -> Result<KeyInfo> {
        match self {
            Self::Key(k) => Ok(k),
            Self::Part(_) => Err(ClientError::InvalidArgument(
                "a key commit returned a part".into(),
            )),
        }
    }

    /// The part, or an error if a key was committed.
    pub(crate) fn into_part(self) -> Result<PartInfo> {
        match self {
            Self::Part(p) => Ok(p),
            Self::Key(_) => Err(ClientError::InvalidArgument(
                "a part commit returned a key".into(),
            )),
        }
    }
}

fn bucket_not_found(e: ClientError, bucket: &str) -> ClientError {
    match e {
        ClientError::Om {
            code: OmErrorCode::BucketNotFound,
            ..
        } => ClientError::BucketNotFound(bucket.to_string()),
        e => e,
    }
}

fn key_not_found(e: ClientError, bucket: &str, key: &str) -> ClientError {
    match e {
        ClientError::Om {
            code: OmErrorCode::KeyNotFound,
            ..
        } => ClientError::KeyNotFound {
            bucket: bucket.to_string(),
            key: key.to_string(),
        },
        e => e,
    }
}

fn om_error(op: &'static str, s: &Status) -> ClientError {
    let code = OmErrorCode::of(s);
    let message = if code == OmErrorCode::Unspecified || code == OmErrorCode::Unavailable {
        // No om code, or a transport failure: keep the gRPC code in view.
        format!("{:?}: {}", s.code(), s.message())
    } else {
        s.message().to_string()
    };
    ClientError::Om { op, code, message }
}

/// An error and its sources as one line (`a: b: c`), each message once.
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut next = Some(e);
    while let Some(err) = next {
        let text = err.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        next = err.source();
    }
    parts.join(": ")
}

impl OmClient {
    /// Connects to the oms at `addresses` (comma-separated `HOST:PORT`s):
    /// to the first that accepts a connection, in order; the others are
    /// connected when a call first fails over to them.
    ///
    /// # Errors
    /// [`ClientError::InvalidArgument`] for a malformed or repeated address;
    /// [`ClientError::Connect`] naming every address and why it failed if
    /// none accepts a connection.
    pub(crate) async fn connect(
        addresses: &str,
        timeout: Duration,
        tls: Option<&proto_crate::tls::TlsConfig>,
    ) -> Result<Self> {
        let addresses = proto_crate::address::parse_list(addresses)
            .map_err(|e| ClientError::InvalidArgument(e.to_string()))?;
        let stub = |channel| {
            OzoneManagerServiceClient::with_interceptor(
                channel,
                request_id::attach as request_id::Attach,
            )
            .max_decoding_message_size(64 * 1024 * 1024)
        };
        let mut oms = Vec::with_capacity(addresses.len());
        let mut failures = Vec::new();
        let mut current = None;
        for address in addresses {
            let endpoint = proto_crate::tls::endpoint(&address, tls)
                .map_err(|e| ClientError::Connect {
                    address: address.clone(),
                    message: e.to_string(),
                })?
                .connect_timeout(Duration::from_secs(5))
                .tcp_nodelay(true);
            let channel = if current.is_some() {
                endpoint.connect_lazy()
            } else {
                match endpoint.connect().await {
                    Ok(channel) => {
                        current = Some(oms.len());
                        channel
                    }
                    Err(e) => {
                        failures.push((address.clone(), error_chain(&e)));
                        endpoint.connect_lazy()
                    }
                }
            };
            oms.push((address, stub(channel)));
        }
        let Some(current) = current else {
            return Err(ClientError::Connect {
                address: oms
                    .iter()
                    .map(|(a, _)| a.as_str())
                    .collect::<Vec<_>>()
                    .join(","),
                message: match failures.as_slice() {
                    [(_, why)] => why.clone(),
                    all => all
                        .iter()
                        .map(|(a, why)| format!("{a}: {why}"))
                        .collect::<Vec<_>>()
                        .join("; "),
                },
            });
        };
        let id: u128 = rand::random();
        Ok(Self {
            oms: oms.into(),
            current: Arc::new(AtomicUsize::new(current)),
            timeout,
            client_id: format!("{id:032x}"),
        })
    }

    /// Sends `req` with `send` to the current om, and on to the next
    /// addresses in turn while it fails as `how` allows, all within the om
    /// deadline. The om that answered (even with an error) becomes the
    /// current one.
    ///
    /// A read also moves on from an om that does not answer: with `n`
    /// addresses, once an om has had `deadline / n` without answering the
    /// read is sent to the next one as well, and the first answer from any
    /// of them wins (a read sent twice changes nothing). A hung om (a stopped
    /// process, a host gone without a reset) then costs a share of the
    /// deadline, and a slow one still answers if it is first. A change
    /// waits for its om until the deadline: it may have been applied there.
    /// An om that answers it does not lead ([`OmErrorCode::NotLeader`]: a
    /// call only the om running the background services answers) applied
    /// nothing: any call goes on to the next om.
    async fn call<Q, T, F, Fut>(&self, op: &'static str, how: Resend, req: Q, send: F) -> Result<T>
    where
        Q: Clone,
        F: Fn(Stub, Q) -> Fut,
        Fut: Future<Output = std::result::Result<tonic::Response<T>, Status>>,
    {
        use futures::stream::{FuturesUnordered, StreamExt};
        let deadline = tokio::time::Instant::now() + self.timeout;
        let n = self.oms.len();
        let first = self.current.load(Ordering::Relaxed) % n;
        let share = self.timeout / u32::try_from(n).unwrap_or(u32::MAX);
        let hedges = how == Resend::Read && n > 1;
        let address = |i: usize| self.oms.get(i).map_or("?", |(a, _)| a.as_str());
        let launch = |i: usize| {
            let answer = self
                .oms
                .get(i)
                .map(|(_, stub)| send(stub.clone(), req.clone()));
            async move {
                match answer {
                    Some(a) => (i, a.await),
                    None => (i, Err(Status::internal("no such om index"))),
                }
            }
        };
        let mut inflight = FuturesUnordered::new();
        inflight.push(launch(first));
        // How many oms the call has been sent to (in list order from `first`).
        let mut sent = 1;
        let mut hedge_at = tokio::time::Instant::now() + share;
        let mut failed: Vec<String> = Vec::new();
        // A repeatable call's next round, once every om has failed.
        let mut retry_at: Option<tokio::time::Instant> = None;
        let mut pause = RETRY_PAUSE_MIN;
        let last = loop {
            let wake = if hedges && sent < n {
                hedge_at.min(deadline)
            } else {
                deadline
            };
            tokio::select! {
                Some((i, answer)) = inflight.next() => match answer {
                    Ok(r) => return Ok(self.answered(op, i, first, r.into_inner())),
                    Err(s) if resend(&s, how) => {
                        tracing::debug!(op, om = %address(i), "om unreachable: {}", s.message());
                        // The first rounds' reasons, then the latest (a waiting call may
                        // make many).
                        let why = format!("{}: {}", address(i), s.message());
                        if failed.len() <= n * ROUNDS {
                            failed.push(why);
                        } else if let Some(latest) = failed.last_mut() {
                            *latest = why;
                        }
                        if sent < n * ROUNDS {
                            inflight.push(launch((first + sent) % n));
                            sent += 1;
                            hedge_at = tokio::time::Instant::now() + share;
                        } else if how.waits() {
                            if inflight.is_empty() {
                                let at = tokio::time::Instant::now() + pause;
                                if at >= deadline {
                                    // No time for another round: fail with the reasons.
                                    break s;
                                }
                                retry_at = Some(at);
                                pause = (pause * 2).min(RETRY_PAUSE_MAX);
                            }
                        } else if inflight.is_empty() {
                            break s;
                        }
                    }
                    Err(s) => return Err(om_error(op, &self.answered(op, i, first, s))),
                },
                () = tokio::time::sleep_until(retry_at.unwrap_or(deadline)), if retry_at.is_some() => {
                    retry_at = None;
                    inflight.push(launch((first + sent) % n));
                    sent += 1;
                }
                () = tokio::time::sleep_until(wake) => {
                    if wake >= deadline {
                        return Err(ClientError::OmTimeout {
                            op,
                            after: self.timeout,
                        });
                    }
                    // The om asked last is slow: ask the next one as well,
                    // still listening for the first.
                    let slow = (first + sent - 1) % n;
                    tracing::debug!(op, om = %address(slow), "om gave no answer within {share:?}");
                    failed.push(format!("{}: no answer within {share:?}", address(slow)));
                    inflight.push(launch((first + sent) % n));
                    sent += 1;
                    hedge_at = tokio::time::Instant::now() + share;
                }
            }
        };
        // Every om failed: name each and why.
        let mut e = om_error(op, &last);
        if let ClientError::Om { message, .. } = &mut e {
            *message = format!("no om answered ({})", failed.join("; "));
        }
        Err(e)
    }

    /// Makes om `i`, which answered (even with an error), the current one
    /// when it is not already; passes `answer` through.
    fn answered<A>(&self, op: &'static str, i: usize, first: usize, answer: A) -> A {
        if i != first {
            self.current.store(i, Ordering::Relaxed);
            let om = self.oms.get(i).map_or("?", |(a, _)| a.as_str());
            tracing::info!(op, om = %om, "failed over to om");
        }
        answer
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused() -> Status {
        let io = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let mut s = Status::unavailable("tcp connect error");
        s.set_source(Arc::new(tonic::ConnectError(Box::new(io))));
        s
    }

    #[test]
    fn only_reads_and_repeatable_calls_go_on_after_a_call_may_have_left() {
        // Never sent: anything may go on.
        assert!(resend(&refused(), Resend::Read));
        assert!(resend(&refused(), Resend::IfNotSent));
        // Lost mid-call (no connect error): a read goes on, a change does not.
        for lost in [
            Status::unavailable("connection reset"),
            Status::unknown("h2 protocol error"),
            Status::cancelled("operation was canceled"),
        ] {
            assert!(resend(&lost, Resend::Read), "{lost:?}");
            assert!(resend(&lost, Resend::Repeatable), "{lost:?}");
            assert!(!resend(&lost, Resend::IfNotSent), "{lost:?}");
            assert!(!resend(&lost, Resend::Commit), "{lost:?}");
        }
        assert!(resend(&refused(), Resend::Repeatable));
        assert!(resend(&refused(), Resend::Commit));
        // An om's own answer (with its code) is final either way.
        let answered = OmErrorCode::KeyNotFound.status("no such key");
        for how in [
            Resend::Read,
            Resend::Repeatable,
            Resend::IfNotSent,
            Resend::Commit,
        ] {
            assert!(!resend(&answered, how), "{how:?}");
        }
        // Only a writer's session calls and its commit wait for an om to come back.
        assert!(Resend::Repeatable.waits() && Resend::Commit.waits());
        // A NOT_LEADER refusal applied nothing: every kind moves on.
        let not_leader = OmErrorCode::NotLeader.status("not the leader; om 127.0.0.1:1 leads");
        for how in [
            Resend::Read,
            Resend::Repeatable,
            Resend::IfNotSent,
            Resend::Commit,
        ] {
            assert!(resend(&not_leader, how), "{how:?}");
        }
        assert!(!Resend::Read.waits() && !Resend::IfNotSent.waits());
    }
}
