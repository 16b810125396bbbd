//! Who karpenter-rs is on the wire: the User-Agent of every request and the field manager of
//! every write, so `kubectl get -o yaml --show-managed-fields` and the API server's audit log
//! tell karpenter-rs's writes from anyone else's (without them the API server records
//! `unknown`, or the HTTP library's name).
//!
//! Upstream names its writes `karpenter` (controller-runtime's client with `FieldOwner`); the
//! User-Agent names the project and version, `karpenter-rs/0.1.0`.

use kube::api::{PatchParams, PostParams};

/// The field manager of every create, update and patch karpenter-rs sends.
pub const FIELD_MANAGER: &str = "karpenter";

/// The product name in the User-Agent (`karpenter-rs/VERSION`).
pub const USER_AGENT_PRODUCT: &str = "karpenter-rs";

/// `karpenter-rs/VERSION` (the workspace version).
pub fn user_agent() -> String {
    format!("{USER_AGENT_PRODUCT}/{}", env!("CARGO_PKG_VERSION"))
}

/// Sends [`user_agent`] with every request of clients built from `config` (kube's client has
/// no User-Agent of its own).
pub fn identify(config: &mut kube::Config) {
    if let Ok(value) = http::HeaderValue::from_str(&user_agent()) {
        config
            .headers
            .retain(|(name, _)| *name != http::header::USER_AGENT);
        config.headers.push((http::header::USER_AGENT, value));
    }
}

/// Create / replace parameters naming [`FIELD_MANAGER`].
pub fn post_params() -> PostParams {
    PostParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PostParams::default()
    }
}

/// Merge / JSON patch parameters naming [`FIELD_MANAGER`].
pub fn patch_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_write_names_the_field_manager() {
        assert_eq!(post_params().field_manager.as_deref(), Some("karpenter"));
        assert_eq!(patch_params().field_manager.as_deref(), Some("karpenter"));
    }

    #[test]
    fn the_user_agent_carries_the_version_once() {
        let mut config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        identify(&mut config);
        identify(&mut config);
        let agents: Vec<_> = config
            .headers
            .iter()
            .filter(|(name, _)| *name == http::header::USER_AGENT)
            .map(|(_, value)| value.to_str().unwrap().to_owned())
            .collect();
        assert_eq!(
            agents,
            vec![format!("karpenter-rs/{}", env!("CARGO_PKG_VERSION"))]
        );
    }
}
