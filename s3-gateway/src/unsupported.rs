//! Request headers that would change what a write means and that the gateway does not
//! implement: refused with 501 `NotImplemented` naming the header, never accepted and ignored
//! (an ignored `x-amz-server-side-encryption` would store plaintext the client believes
//! encrypted; an ignored grant or Object Lock retention would leave data unprotected).

use http::HeaderMap;
use s3s::{S3Error, S3ErrorCode, S3Result};

/// Whether header `name` with `value` asks for something the gateway does not do.
fn unsupported(name: &str, value: &str) -> bool {
    let v = value.trim();
    match name {
        // The canned ACLs modelled here (see `acl`); the others would grant writes or
        // name a second owner.
        "x-amz-acl" => ec_client::CannedAcl::parse(v).is_err(),
        "x-amz-storage-class" => !v.eq_ignore_ascii_case("STANDARD"),
        "x-amz-bucket-object-lock-enabled" => v.eq_ignore_ascii_case("true"),
        "x-amz-website-redirect-location" | "x-amz-write-offset-bytes" => true,
        n => {
            n.starts_with("x-amz-grant-")
                || n.starts_with("x-amz-object-lock-")
                || n.starts_with("x-amz-server-side-encryption")
                || n.starts_with("x-amz-copy-source-server-side-encryption")
        }
    }
}

/// Refuses a request carrying any header [`unsupported`] names.
///
/// # Errors
/// 501 `NotImplemented` naming the first such header.
pub(crate) fn refuse_unsupported(headers: &HeaderMap) -> S3Result<()> {
    for (name, value) in headers {
        let v = value.to_str().unwrap_or("");
        if unsupported(name.as_str(), v) {
            return Err(S3Error::with_message(
                S3ErrorCode::NotImplemented,
                format!(
                    "A header you provided implies functionality that is not implemented: {}",
                    name.as_str()
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::unsupported;

    #[test]
    fn what_changes_a_writes_meaning_is_refused() {
        assert!(!unsupported("x-amz-acl", "private"));
        assert!(!unsupported("x-amz-acl", "public-read"));
        assert!(!unsupported("x-amz-acl", "authenticated-read"));
        assert!(unsupported("x-amz-acl", "public-read-write"));
        assert!(unsupported("x-amz-acl", "bucket-owner-full-control"));
        assert!(unsupported("x-amz-grant-read", "id=x"));
        assert!(unsupported("x-amz-server-side-encryption", "AES256"));
        assert!(unsupported(
            "x-amz-server-side-encryption-customer-key",
            "k"
        ));
        assert!(unsupported("x-amz-object-lock-mode", "GOVERNANCE"));
        assert!(!unsupported("x-amz-storage-class", "STANDARD"));
        assert!(unsupported("x-amz-storage-class", "GLACIER"));
        assert!(!unsupported("x-amz-tagging", "a=b"), "tags are kept");
        assert!(unsupported(
            "x-amz-copy-source-server-side-encryption-customer-key",
            "k"
        ));
        assert!(unsupported("x-amz-website-redirect-location", "/x"));
        assert!(!unsupported("x-amz-meta-color", "red"));
        assert!(!unsupported("content-type", "text/plain"));
    }
}
