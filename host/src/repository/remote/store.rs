//! The object_store client for a remote repository, built from its address and credentials.
use std::sync::Arc;
use std::time::Duration;

use object_store::ObjectStore;
use object_store::aws::AmazonS3Builder;
use object_store::azure::MicrosoftAzureBuilder;
use object_store::gcp::GoogleCloudStorageBuilder;
use object_store::local::LocalFileSystem;
use object_store::{ClientOptions, RetryConfig};

use super::credentials::{self, Credential, Env};
use super::uri::{Cloud, RemoteUri};

/// Why no client could be built.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(transparent)]
    Credentials(#[from] credentials::CredentialError),
    #[error(
        "no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE with a shared credentials file, or TRITON_CLOUD_CREDENTIAL_PATH{0}"
    )]
    NoAwsCredentials(&'static str),
    #[error("no Azure storage account: write as://ACCOUNT/container/path or set AZURE_STORAGE_ACCOUNT")]
    NoAzureAccount,
    #[error("cannot set up the client: {0}")]
    Client(#[from] object_store::Error),
}

/// How long one request may take, and how often a failed one is retried: a repository that
/// cannot be reached fails a sync within a minute or so, rather than holding loads for long.
fn client_options() -> (ClientOptions, RetryConfig) {
    let options =
        ClientOptions::new().with_timeout(Duration::from_secs(30)).with_connect_timeout(Duration::from_secs(5));
    let retry = RetryConfig { max_retries: 2, retry_timeout: Duration::from_secs(30), ..RetryConfig::default() };
    (options, retry)
}

/// The client for `uri`, with its credentials from `env`.
pub fn build(uri: &RemoteUri, env: &dyn Env) -> Result<Arc<dyn ObjectStore>, StoreError> {
    let (options, retry) = client_options();
    let credential = credentials::resolve(uri, env)?;
    Ok(match (uri.cloud, credential) {
        (Cloud::S3, Credential::S3(c)) => {
            let mut b = AmazonS3Builder::from_env()
                .with_bucket_name(&uri.bucket)
                .with_client_options(options)
                .with_retry(retry)
                .with_region(if c.region.is_empty() { "us-east-1" } else { c.region.as_str() });
            if !c.key_id.is_empty() {
                b = b.with_access_key_id(&c.key_id).with_secret_access_key(&c.secret_key);
                if !c.session_token.is_empty() {
                    b = b.with_token(&c.session_token);
                }
            } else if !has_ambient_aws_credentials(env) {
                // Without keys object_store would ask the instance metadata service, which a
                // store of one's own never has and which, off AWS, only times out.
                if uri.endpoint.is_some() {
                    return Err(StoreError::NoAwsCredentials(" (a custom endpoint has no instance metadata)"));
                }
                if env.var("AWS_EC2_METADATA_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
                    return Err(StoreError::NoAwsCredentials(" (AWS_EC2_METADATA_DISABLED is set)"));
                }
            }
            if let Some(endpoint) = &uri.endpoint {
                // Path-style requests to one's own store, as Triton's client (no virtual hosts).
                b = b.with_endpoint(endpoint).with_allow_http(true).with_virtual_hosted_style_request(false);
            }
            Arc::new(b.build()?)
        }
        (Cloud::Gcs, Credential::Gcs(file)) => {
            let mut b = GoogleCloudStorageBuilder::from_env()
                .with_bucket_name(&uri.bucket)
                .with_client_options(options)
                .with_retry(retry);
            if let Some(file) = file {
                b = b.with_application_credentials(file.display().to_string());
            }
            Arc::new(b.build()?)
        }
        (Cloud::Azure, Credential::Azure(c)) => {
            let account =
                if c.account_str.is_empty() { uri.account.clone().unwrap_or_default() } else { c.account_str };
            if account.is_empty() {
                return Err(StoreError::NoAzureAccount);
            }
            let mut b = MicrosoftAzureBuilder::from_env()
                .with_account(account)
                .with_container_name(&uri.bucket)
                .with_client_options(options)
                .with_retry(retry);
            if !c.account_key.is_empty() {
                b = b.with_access_key(c.account_key);
            }
            if !c.client_id.is_empty() {
                b = b.with_client_id(c.client_id);
            }
            Arc::new(b.build()?)
        }
        _ => Arc::new(LocalFileSystem::new_with_prefix(format!("/{}", uri.prefix))?),
    })
}

/// Whether the environment names a credential source object_store finds on its own: a web
/// identity token (EKS IRSA) or a container credentials endpoint (ECS, EKS Pod Identity).
fn has_ambient_aws_credentials(env: &dyn Env) -> bool {
    env.var("AWS_WEB_IDENTITY_TOKEN_FILE").is_some()
        || env.var("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI").is_some()
        || env.var("AWS_CONTAINER_CREDENTIALS_FULL_URI").is_some()
}
