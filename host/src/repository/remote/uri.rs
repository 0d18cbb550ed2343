//! Remote repository addresses, parsed as tritonserver parses them, so that a launch command
//! written for Triton points Nereus at the same objects:
//!
//! - `s3://bucket/path`, and `s3://[http://|https://]host:port/bucket/path` for an S3-compatible
//!   store of one's own (MinIO, Ceph, moto): a host *with a port* is the endpoint, reached over
//!   plain HTTP unless `https://` is written, with path-style requests (Triton's regex, s3.h);
//! - `gs://bucket/path`;
//! - `as://account/container/path` (Triton's Azure spelling; `az://` is taken as the same, with
//!   the account first, not object_store's container-first `az://`);
//! - `file:///absolute/path`, a folder copied into the cache like a bucket (a volume one does not
//!   want read while serving).
//!
//! Repeated slashes collapse and a trailing slash goes, as Triton's `CleanPath` does.
use std::fmt;

/// Which kind of store an address names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cloud {
    S3,
    Gcs,
    Azure,
    File,
}

impl Cloud {
    /// The name of this store in `TRITON_CLOUD_CREDENTIAL_PATH`'s JSON and in cache folders.
    pub fn key(self) -> &'static str {
        match self {
            Cloud::S3 => "s3",
            Cloud::Gcs => "gs",
            Cloud::Azure => "as",
            Cloud::File => "file",
        }
    }
}

/// A parsed remote repository address.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RemoteUri {
    /// The address as the operator wrote it, cleaned of repeated and trailing slashes: what log
    /// lines and errors name, and what credentials are matched against.
    pub text: String,
    pub cloud: Cloud,
    /// An S3-compatible endpoint (`http://host:port`), from `s3://host:port/…`.
    pub endpoint: Option<String>,
    /// The Azure storage account (`as://account/…`).
    pub account: Option<String>,
    /// The bucket or container; for `file://`, empty.
    pub bucket: String,
    /// The objects' common prefix inside the bucket, without leading or trailing slashes (for
    /// `file://`, the absolute folder).
    pub prefix: String,
}

/// Why an address cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("model repository '{uri}': {reason}")]
pub struct UriError {
    pub uri: String,
    pub reason: String,
}

/// The schemes that make a `--model-repository` value remote.
pub const SCHEMES: [&str; 5] = ["s3://", "gs://", "as://", "az://", "file://"];

/// Whether `text` names a remote repository (else it is a local folder, as before).
pub fn is_remote(text: &str) -> bool {
    SCHEMES.iter().any(|s| text.starts_with(s))
}

impl RemoteUri {
    pub fn parse(text: &str) -> Result<RemoteUri, UriError> {
        let fail = |reason: &str| UriError { uri: text.to_string(), reason: reason.to_string() };
        let (scheme, rest) = text.split_once("://").ok_or_else(|| fail("not a remote address"))?;
        let cloud = match scheme {
            "s3" => Cloud::S3,
            "gs" => Cloud::Gcs,
            "as" | "az" => Cloud::Azure,
            "file" => Cloud::File,
            _ => return Err(fail("unknown scheme (s3://, gs://, as://, az:// or file://)")),
        };
        if cloud == Cloud::File {
            let path = clean(rest);
            if !rest.starts_with('/') || path.is_empty() {
                return Err(fail("a file:// repository needs an absolute path (file:///folder)"));
            }
            if path.split('/').any(|p| p == "..") {
                return Err(fail("'..' is not allowed in a repository address"));
            }
            return Ok(RemoteUri {
                text: format!("file:///{path}"),
                cloud,
                endpoint: None,
                account: None,
                bucket: String::new(),
                prefix: path,
            });
        }
        // Triton's S3 paths may carry the endpoint's scheme right after s3://.
        let (protocol, rest) = match (rest.strip_prefix("https://"), rest.strip_prefix("http://")) {
            (Some(r), _) if cloud == Cloud::S3 => ("https://", r),
            (_, Some(r)) if cloud == Cloud::S3 => ("http://", r),
            _ => ("", rest),
        };
        let path = clean(rest);
        if path.is_empty() {
            return Err(fail("no bucket name found"));
        }
        let mut parts = path.splitn(2, '/');
        let first = parts.next().unwrap_or_default().to_string();
        let after = parts.next().unwrap_or_default().to_string();
        let uri = |endpoint, account, bucket: String, prefix: String| {
            if prefix.split('/').any(|p| p == "..") {
                return Err(fail("'..' is not allowed in a repository address"));
            }
            let shown = format!("{scheme}://{protocol}{path}");
            Ok(RemoteUri { text: shown, cloud, endpoint, account, bucket, prefix })
        };
        match cloud {
            Cloud::S3 if is_host_port(&first) => {
                // s3://host:port/bucket/path: Triton's custom endpoint, HTTP unless https:// given.
                let scheme = if protocol == "https://" { "https://" } else { "http://" };
                let (bucket, prefix) = after.split_once('/').unwrap_or((after.as_str(), ""));
                if bucket.is_empty() {
                    return Err(fail("no bucket name found after the endpoint"));
                }
                uri(Some(format!("{scheme}{first}")), None, bucket.to_string(), prefix.to_string())
            }
            Cloud::S3 if !protocol.is_empty() => Err(fail("an http:// or https:// endpoint needs a port (host:port)")),
            Cloud::Azure => {
                // as://account/container/path; the account may be written as its blob host.
                let account = first.strip_suffix(".blob.core.windows.net").unwrap_or(&first).to_string();
                let (container, prefix) = after.split_once('/').unwrap_or((after.as_str(), ""));
                if container.is_empty() {
                    return Err(fail("no container name found (as://account/container/path)"));
                }
                uri(None, Some(account), container.to_string(), prefix.to_string())
            }
            _ => uri(None, None, first, after),
        }
    }

    /// The full address of an object of this repository, from its path under the prefix.
    pub fn object(&self, relative: &str) -> String {
        format!("{}/{relative}", self.text)
    }
}

impl fmt::Display for RemoteUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// `rest` without leading, trailing and repeated slashes.
fn clean(rest: &str) -> String {
    rest.split('/').filter(|p| !p.is_empty()).collect::<Vec<_>>().join("/")
}

/// `host:port` as Triton's regex has it: `[0-9a-zA-Z-.]+:[0-9]+`.
fn is_host_port(text: &str) -> bool {
    let Some((host, port)) = text.rsplit_once(':') else { return false };
    !host.is_empty()
        && host.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
        && !port.is_empty()
        && port.bytes().all(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> RemoteUri {
        RemoteUri::parse(text).unwrap()
    }

    #[test]
    fn s3_bucket_and_prefix_as_triton_cleans_them() {
        let u = parse("s3://bucket//models/triton/");
        assert_eq!((u.cloud, u.bucket.as_str(), u.prefix.as_str()), (Cloud::S3, "bucket", "models/triton"));
        assert_eq!(u.endpoint, None);
        assert_eq!(u.text, "s3://bucket/models/triton");
        assert_eq!(parse("s3://bucket").prefix, "");
    }

    #[test]
    fn s3_host_with_port_is_a_custom_endpoint_over_http_unless_https_is_written() {
        let u = parse("s3://localhost:9000/models/repo");
        assert_eq!(u.endpoint.as_deref(), Some("http://localhost:9000"));
        assert_eq!((u.bucket.as_str(), u.prefix.as_str()), ("models", "repo"));
        let u = parse("s3://https://minio.example.com:443/bucket");
        assert_eq!(u.endpoint.as_deref(), Some("https://minio.example.com:443"));
        assert_eq!((u.bucket.as_str(), u.prefix.as_str()), ("bucket", ""));
        assert_eq!(parse("s3://http://10.0.0.1:9000/b/p").endpoint.as_deref(), Some("http://10.0.0.1:9000"));
        // A host without a port is a bucket name, as in Triton.
        assert_eq!(parse("s3://my.bucket/p").endpoint, None);
    }

    #[test]
    fn gcs_and_azure() {
        let u = parse("gs://bucket/a/b");
        assert_eq!((u.cloud, u.bucket.as_str(), u.prefix.as_str()), (Cloud::Gcs, "bucket", "a/b"));
        let u = parse("as://acct.blob.core.windows.net/container/models");
        assert_eq!(u.account.as_deref(), Some("acct"));
        assert_eq!((u.cloud, u.bucket.as_str(), u.prefix.as_str()), (Cloud::Azure, "container", "models"));
        assert_eq!(parse("az://acct/c").account.as_deref(), Some("acct"));
    }

    #[test]
    fn file_needs_an_absolute_path() {
        let u = parse("file:///srv/models/");
        assert_eq!((u.cloud, u.prefix.as_str(), u.text.as_str()), (Cloud::File, "srv/models", "file:///srv/models"));
        assert!(RemoteUri::parse("file://relative/x").is_err());
    }

    #[test]
    fn malformed_addresses_say_why() {
        for (text, why) in [
            ("s3://", "no bucket name found"),
            ("as://acct", "no container name"),
            ("s3://localhost:9000/", "no bucket name found after the endpoint"),
            ("s3://https://host/bucket", "needs a port"),
            ("gs://b/../etc", "'..'"),
        ] {
            let e = RemoteUri::parse(text).unwrap_err();
            assert!(e.to_string().contains(why), "{text}: {e}");
            assert!(e.to_string().contains(text), "{text}: {e}");
        }
        assert!(is_remote("s3://b") && is_remote("as://a/c") && !is_remote("/models") && !is_remote("models"));
    }
}
