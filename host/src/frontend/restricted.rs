//! Restricted APIs, as tritonserver's `--http-restricted-api` and `--grpc-restricted-protocol`:
//! groups of endpoints that answer only requests carrying a configured header with the configured
//! value. Each option is `<api>[,<api>…]:<key>=<value>`; an API may be in one group at most. Over
//! gRPC the header is `triton-grpc-protocol-<key>`, as in Triton.
use std::collections::HashMap;

/// The endpoint groups Triton names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Api {
    Health,
    Metadata,
    Inference,
    SharedMemory,
    ModelConfig,
    ModelRepository,
    Statistics,
    Trace,
    Logging,
}

impl Api {
    fn parse(name: &str) -> Option<Api> {
        Some(match name {
            "health" => Api::Health,
            "metadata" => Api::Metadata,
            "inference" => Api::Inference,
            "shared-memory" => Api::SharedMemory,
            "model-config" => Api::ModelConfig,
            "model-repository" => Api::ModelRepository,
            "statistics" => Api::Statistics,
            "trace" => Api::Trace,
            "logging" => Api::Logging,
            _ => return None,
        })
    }
}

/// Which APIs need which header, for one protocol.
#[derive(Clone, Debug, Default)]
pub struct Restrictions {
    /// API → (header name, lower case; the value it must carry)
    groups: HashMap<Api, (String, String)>,
}

impl Restrictions {
    /// Parses the options of one protocol; `header_prefix` is "" for HTTP and
    /// "triton-grpc-protocol-" for gRPC, `what` names the unit in errors ("api" or "protocol").
    pub fn parse(options: &[String], header_prefix: &str, what: &str) -> Result<Restrictions, String> {
        let mut groups = HashMap::new();
        for option in options {
            let (apis, kv) = option
                .split_once(':')
                .ok_or_else(|| format!("restricted {what} option '{option}' must be <{what}s>:<key>=<value>"))?;
            let (key, value) = kv
                .split_once('=')
                .filter(|(k, _)| !k.is_empty())
                .ok_or_else(|| format!("restricted {what} option '{option}' must be <{what}s>:<key>=<value>"))?;
            let header = format!("{header_prefix}{}", key.to_ascii_lowercase());
            for name in apis.split(',').map(str::trim) {
                let api = Api::parse(name).ok_or_else(|| format!("unknown restricted {what} '{name}'"))?;
                if groups.insert(api, (header.clone(), value.to_string())).is_some() {
                    return Err(format!("{what} '{name}' can not be specified in multiple config groups"));
                }
            }
        }
        Ok(Restrictions { groups })
    }

    /// `None` when `api` is open or `header` (a lookup in the request's headers) carries the value
    /// its group needs; else the header that is missing or wrong.
    pub fn refused<'a>(&'a self, api: Api, header: impl Fn(&str) -> Option<&'a str>) -> Option<&'a str> {
        if self.groups.is_empty() {
            return None;
        }
        let (name, value) = self.groups.get(&api)?;
        match header(name) {
            Some(v) if v == value => None,
            _ => Some(name),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(options: &[&str]) -> Result<Restrictions, String> {
        let options: Vec<String> = options.iter().map(|s| s.to_string()).collect();
        Restrictions::parse(&options, "triton-grpc-protocol-", "protocol")
    }

    #[test]
    fn groups_are_parsed_and_checked_as_triton_does() {
        let r = parse(&["model-repository,shared-memory:Admin-Key=s3cret", "inference:infer-key=i"]).unwrap();
        let admin = "triton-grpc-protocol-admin-key";
        assert_eq!(r.refused(Api::ModelRepository, |_| None), Some(admin));
        assert_eq!(r.refused(Api::SharedMemory, |h| (h == admin).then_some("wrong")), Some(admin));
        assert_eq!(r.refused(Api::ModelRepository, |h| (h == admin).then_some("s3cret")), None);
        assert_eq!(r.refused(Api::Health, |_| None), None, "open");
        assert_eq!(r.refused(Api::Inference, |_| None), Some("triton-grpc-protocol-infer-key"));
        let err = parse(&["model-repository,health:k1=v1", "metadata,health:k2=v2"]).unwrap_err();
        assert_eq!(err, "protocol 'health' can not be specified in multiple config groups");
        assert_eq!(parse(&["model-reposit:k=v"]).unwrap_err(), "unknown restricted protocol 'model-reposit'");
        assert!(parse(&["health"]).unwrap_err().contains("<protocols>:<key>=<value>"));
        assert!(parse(&["health:=v"]).unwrap_err().contains("<protocols>:<key>=<value>"));
        assert!(parse(&[]).unwrap().is_empty());
    }
}
