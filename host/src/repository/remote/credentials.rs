//! Where a remote repository's credentials come from, as tritonserver looks for them:
//! `TRITON_CLOUD_CREDENTIAL_PATH`'s JSON when it is set (the entry whose name is the longest prefix
//! of the address; no entry matching is an error, as in Triton), else each cloud's environment:
//!
//! - S3: `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY` (with `AWS_SESSION_TOKEN`), else the profile
//!   `AWS_PROFILE` names (or `default`) in the shared credentials file (`AWS_SHARED_CREDENTIALS_FILE`,
//!   `~/.aws/credentials`), with its region from the config file (`AWS_CONFIG_FILE`,
//!   `~/.aws/config`); `AWS_DEFAULT_REGION` or `AWS_REGION` for the region. Without any of these,
//!   object_store's own chain (web identity, ECS/EKS container credentials, instance metadata).
//! - GCS: `GOOGLE_APPLICATION_CREDENTIALS` (a service account or authorized-user JSON file), else
//!   object_store's (well-known application default file, then the metadata server).
//! - Azure: `AZURE_STORAGE_ACCOUNT` and `AZURE_STORAGE_KEY`, else object_store's (`AZURE_*`
//!   service principal, workload or managed identity).
//!
//! The JSON's shape is Triton's:
//! `{"s3": {"s3://bucket": {"key_id": …, "secret_key": …, "session_token": …, "region": …,
//! "profile": …}}, "gs": {"gs://bucket": "/path/key.json"}, "as": {"as://account/container":
//! {"account_str": …, "account_key": …}}}`.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::uri::{Cloud, RemoteUri};

/// Credentials for one S3 repository (any field may be empty).
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct S3Credential {
    pub key_id: String,
    pub secret_key: String,
    pub session_token: String,
    pub region: String,
    pub profile: String,
}

/// Credentials for one Azure repository.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(default)]
pub struct AzureCredential {
    pub account_str: String,
    pub account_key: String,
    pub auth_type: String,
    pub client_id: String,
}

/// What was found for one repository.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Credential {
    S3(S3Credential),
    /// A Google credentials JSON file, or none (object_store's default chain).
    Gcs(Option<PathBuf>),
    Azure(AzureCredential),
    /// `file://` needs none.
    None,
}

/// Why credentials could not be had.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    #[error("cannot read TRITON_CLOUD_CREDENTIAL_PATH file {}: {source}", .path.display())]
    Unreadable { path: PathBuf, source: std::io::Error },
    #[error("TRITON_CLOUD_CREDENTIAL_PATH file {} is not valid credential JSON: {source}", .path.display())]
    Malformed { path: PathBuf, source: serde_json::Error },
    #[error("no credential in TRITON_CLOUD_CREDENTIAL_PATH file {} matches {uri} (Triton's \"Cannot match credential for path\")", .path.display())]
    NoMatch { path: PathBuf, uri: String },
    #[error("AWS profile '{profile}' is not in {}", .file.display())]
    NoProfile { profile: String, file: PathBuf },
}

/// Triton's credential file, by cloud then by address prefix.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct CredentialFile {
    s3: BTreeMap<String, S3Credential>,
    gs: BTreeMap<String, String>,
    #[serde(rename = "as")]
    azure: BTreeMap<String, AzureCredential>,
}

/// The environment credentials are read from: the process's, or a test's.
pub trait Env {
    fn var(&self, name: &str) -> Option<String>;
}

/// The process environment; empty values count as unset.
pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok().filter(|v| !v.is_empty())
    }
}

/// The credentials for `uri`.
pub fn resolve(uri: &RemoteUri, env: &dyn Env) -> Result<Credential, CredentialError> {
    if let Some(path) = env.var("TRITON_CLOUD_CREDENTIAL_PATH") {
        return from_file(uri, Path::new(&path), env);
    }
    Ok(match uri.cloud {
        Cloud::S3 => Credential::S3(from_aws_env(env)?),
        Cloud::Gcs => Credential::Gcs(env.var("GOOGLE_APPLICATION_CREDENTIALS").map(PathBuf::from)),
        Cloud::Azure => Credential::Azure(AzureCredential {
            account_str: env.var("AZURE_STORAGE_ACCOUNT").unwrap_or_default(),
            account_key: env.var("AZURE_STORAGE_KEY").unwrap_or_default(),
            auth_type: env.var("AZURE_STORAGE_AUTH_TYPE").unwrap_or_default(),
            client_id: env.var("AZURE_STORAGE_CLIENT_ID").unwrap_or_default(),
        }),
        Cloud::File => Credential::None,
    })
}

fn from_file(uri: &RemoteUri, path: &Path, env: &dyn Env) -> Result<Credential, CredentialError> {
    if uri.cloud == Cloud::File {
        return Ok(Credential::None);
    }
    let text = std::fs::read_to_string(path)
        .map_err(|source| CredentialError::Unreadable { path: path.to_path_buf(), source })?;
    let file: CredentialFile = serde_json::from_str(&text)
        .map_err(|source| CredentialError::Malformed { path: path.to_path_buf(), source })?;
    let no_match = || CredentialError::NoMatch { path: path.to_path_buf(), uri: uri.text.clone() };
    Ok(match uri.cloud {
        Cloud::S3 => {
            let mut cred = longest_match(&file.s3, &uri.text).ok_or_else(no_match)?.clone();
            if cred.key_id.is_empty() && !cred.profile.is_empty() {
                cred = from_profile(&cred.profile, env)?;
            }
            Credential::S3(cred)
        }
        Cloud::Gcs => Credential::Gcs(Some(longest_match(&file.gs, &uri.text).ok_or_else(no_match)?.into())),
        Cloud::Azure => Credential::Azure(longest_match(&file.azure, &uri.text).ok_or_else(no_match)?.clone()),
        Cloud::File => Credential::None,
    })
}

/// The entry whose name is the longest prefix of `uri` (Triton sorts its names by length and
/// takes the first that is a prefix).
fn longest_match<'a, T>(entries: &'a BTreeMap<String, T>, uri: &str) -> Option<&'a T> {
    entries.iter().filter(|(name, _)| uri.starts_with(name.as_str())).max_by_key(|(name, _)| name.len()).map(|(_, v)| v)
}

/// The AWS environment: keys, else a named profile, else nothing found (object_store's chain).
fn from_aws_env(env: &dyn Env) -> Result<S3Credential, CredentialError> {
    let region = env.var("AWS_DEFAULT_REGION").or_else(|| env.var("AWS_REGION")).unwrap_or_default();
    if let (Some(key_id), Some(secret_key)) = (env.var("AWS_ACCESS_KEY_ID"), env.var("AWS_SECRET_ACCESS_KEY")) {
        let session_token = env.var("AWS_SESSION_TOKEN").unwrap_or_default();
        return Ok(S3Credential { key_id, secret_key, session_token, region, profile: String::new() });
    }
    let named = env.var("AWS_PROFILE");
    let profile = named.clone().unwrap_or_else(|| "default".into());
    match from_profile(&profile, env) {
        Ok(mut cred) => {
            if !region.is_empty() {
                cred.region = region;
            }
            Ok(cred)
        }
        // The default profile is optional; one named on purpose is not.
        Err(CredentialError::NoProfile { .. }) if named.is_none() => Ok(S3Credential { region, ..Default::default() }),
        Err(e) => Err(e),
    }
}

/// A profile of the shared credentials file, with its region from the config file.
fn from_profile(profile: &str, env: &dyn Env) -> Result<S3Credential, CredentialError> {
    let home = env.var("HOME").map(PathBuf::from).unwrap_or_default();
    let file =
        env.var("AWS_SHARED_CREDENTIALS_FILE").map(PathBuf::from).unwrap_or_else(|| home.join(".aws/credentials"));
    let config = env.var("AWS_CONFIG_FILE").map(PathBuf::from).unwrap_or_else(|| home.join(".aws/config"));
    let no_profile = || CredentialError::NoProfile { profile: profile.to_string(), file: file.clone() };
    let text = std::fs::read_to_string(&file).map_err(|_| no_profile())?;
    let section = ini_section(&text, profile).ok_or_else(no_profile)?;
    let get = |k: &str| section.get(k).cloned().unwrap_or_default();
    // The config file names profiles `[profile NAME]`, except `[default]`.
    let config_name = if profile == "default" { "default".to_string() } else { format!("profile {profile}") };
    let region = std::fs::read_to_string(&config)
        .ok()
        .and_then(|text| ini_section(&text, &config_name))
        .and_then(|s| s.get("region").cloned())
        .unwrap_or_default();
    Ok(S3Credential {
        key_id: get("aws_access_key_id"),
        secret_key: get("aws_secret_access_key"),
        session_token: get("aws_session_token"),
        region,
        profile: profile.to_string(),
    })
}

/// The `key = value` lines of `[name]` in an INI file, or `None` without that section.
fn ini_section(text: &str, name: &str) -> Option<BTreeMap<String, String>> {
    let mut current: Option<&str> = None;
    let mut found: Option<BTreeMap<String, String>> = None;
    for line in text.lines().map(str::trim) {
        if line.starts_with('#') || line.starts_with(';') || line.is_empty() {
            continue;
        }
        if let Some(header) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            current = Some(header.trim());
            if current == Some(name) {
                found.get_or_insert_with(BTreeMap::new);
            }
            continue;
        }
        if current == Some(name)
            && let (Some(map), Some((k, v))) = (found.as_mut(), line.split_once('='))
        {
            map.insert(k.trim().to_string(), v.trim().to_string());
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Vars(Vec<(&'static str, String)>);
    impl Env for Vars {
        fn var(&self, name: &str) -> Option<String> {
            self.0.iter().find(|(k, _)| *k == name).map(|(_, v)| v.clone())
        }
    }

    fn temp(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("nereus-credentials-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn aws_keys_from_the_environment() {
        let env = Vars(vec![
            ("AWS_ACCESS_KEY_ID", "id".into()),
            ("AWS_SECRET_ACCESS_KEY", "secret".into()),
            ("AWS_SESSION_TOKEN", "token".into()),
            ("AWS_DEFAULT_REGION", "eu-west-1".into()),
        ]);
        let uri = RemoteUri::parse("s3://b/p").unwrap();
        let Credential::S3(c) = resolve(&uri, &env).unwrap() else { panic!() };
        assert_eq!((c.key_id.as_str(), c.secret_key.as_str(), c.session_token.as_str()), ("id", "secret", "token"));
        assert_eq!(c.region, "eu-west-1");
    }

    #[test]
    fn aws_profile_from_the_shared_files() {
        let dir = temp("profile");
        std::fs::write(
            dir.join("credentials"),
            "[default]\naws_access_key_id=d\n\n[ci]\naws_access_key_id = ci-id\naws_secret_access_key = ci-secret\n",
        )
        .unwrap();
        std::fs::write(dir.join("config"), "[profile ci]\nregion = ap-south-1\n").unwrap();
        let env = Vars(vec![
            ("AWS_PROFILE", "ci".into()),
            ("AWS_SHARED_CREDENTIALS_FILE", dir.join("credentials").display().to_string()),
            ("AWS_CONFIG_FILE", dir.join("config").display().to_string()),
        ]);
        let uri = RemoteUri::parse("s3://b").unwrap();
        let Credential::S3(c) = resolve(&uri, &env).unwrap() else { panic!() };
        assert_eq!((c.key_id.as_str(), c.secret_key.as_str(), c.region.as_str()), ("ci-id", "ci-secret", "ap-south-1"));
        // A profile named on purpose that is not there is an error naming it; no default profile
        // is not.
        let env = Vars(vec![
            ("AWS_PROFILE", "nope".into()),
            ("AWS_SHARED_CREDENTIALS_FILE", dir.join("credentials").display().to_string()),
        ]);
        assert!(resolve(&uri, &env).unwrap_err().to_string().contains("AWS profile 'nope'"));
        let env = Vars(vec![("HOME", dir.join("nowhere").display().to_string())]);
        assert_eq!(resolve(&uri, &env).unwrap(), Credential::S3(S3Credential::default()));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn triton_credential_file_longest_prefix_wins() {
        let dir = temp("file");
        let file = dir.join("creds.json");
        std::fs::write(
            &file,
            r#"{"s3": {"s3://bucket": {"key_id": "short", "secret_key": "s"},
                       "s3://bucket/models": {"key_id": "long", "secret_key": "l", "region": "r"}},
                "gs": {"gs://g": "/keys/g.json"},
                "as": {"as://acct/c": {"account_str": "acct", "account_key": "k"}}}"#,
        )
        .unwrap();
        let env = Vars(vec![("TRITON_CLOUD_CREDENTIAL_PATH", file.display().to_string())]);
        let cred = |u: &str| resolve(&RemoteUri::parse(u).unwrap(), &env);
        let Credential::S3(c) = cred("s3://bucket/models/x").unwrap() else { panic!() };
        assert_eq!((c.key_id.as_str(), c.region.as_str()), ("long", "r"));
        let Credential::S3(c) = cred("s3://bucket/other").unwrap() else { panic!() };
        assert_eq!(c.key_id, "short");
        assert_eq!(cred("gs://g/m").unwrap(), Credential::Gcs(Some("/keys/g.json".into())));
        let Credential::Azure(a) = cred("as://acct/c/m").unwrap() else { panic!() };
        assert_eq!(a.account_key, "k");
        let e = cred("s3://elsewhere/m").unwrap_err().to_string();
        assert!(e.contains("no credential") && e.contains("s3://elsewhere/m"), "{e}");
        std::fs::write(&file, "{not json").unwrap();
        assert!(cred("s3://bucket").unwrap_err().to_string().contains("not valid credential JSON"));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
