//! AMI resolution against moto: aliases through the public SSM parameters the launcher injects,
//! and id terms through DescribeImages.

use karpenter_api::v1::AmiSelectorTerm;
use karpenter_api::well_known::{ARCH_LABEL, AWS_INSTANCE_GPU_COUNT_LABEL};
use karpenter_aws::{AwsClients, Error};

use crate::harness::moto_clients;

fn now() -> jiff::Timestamp {
    "2026-01-01T00:00:00Z".parse().unwrap()
}

fn alias(alias: &str) -> Vec<AmiSelectorTerm> {
    vec![AmiSelectorTerm {
        alias: Some(alias.into()),
        ..Default::default()
    }]
}

async fn ssm_value(clients: &AwsClients, name: &str) -> String {
    clients
        .ssm
        .get_parameter()
        .name(name)
        .send()
        .await
        .expect("GetParameter")
        .parameter()
        .and_then(|p| p.value())
        .expect("value")
        .to_string()
}

fn arch_of(ami: &karpenter_api::v1::AmiStatus) -> &str {
    ami.requirements
        .iter()
        .find(|r| r.key == ARCH_LABEL)
        .map(|r| r.values.first().unwrap_or_default())
        .unwrap()
}

#[tokio::test]
async fn al2023_alias_resolves_one_standard_ami_per_architecture() {
    let Some(clients) = moto_clients().await else {
        return;
    };
    let amis = clients
        .resolve_amis(&alias("al2023@latest"), "1.32", now())
        .await
        .unwrap();
    // The launcher publishes only the standard variants; the nvidia/neuron paths are absent and skipped.
    assert_eq!(amis.len(), 2, "{amis:#?}");
    let x86 = ssm_value(
        &clients,
        "/aws/service/eks/optimized-ami/1.32/amazon-linux-2023/x86_64/standard/recommended/image_id",
    )
    .await;
    let arm = ssm_value(
        &clients,
        "/aws/service/eks/optimized-ami/1.32/amazon-linux-2023/arm64/standard/recommended/image_id",
    )
    .await;
    let amd64 = amis.iter().find(|a| arch_of(a) == "amd64").unwrap();
    let arm64 = amis.iter().find(|a| arch_of(a) == "arm64").unwrap();
    assert_eq!(amd64.id, x86);
    assert_eq!(arm64.id, arm);
    assert!(amd64.name.is_some());
    assert_eq!(amd64.deprecated, Some(false));
    assert!(
        amd64
            .requirements
            .iter()
            .any(|r| r.key == AWS_INSTANCE_GPU_COUNT_LABEL && r.operator == "DoesNotExist"),
        "standard variant excludes GPU types: {:?}",
        amd64.requirements
    );
}

#[tokio::test]
async fn bottlerocket_and_windows_aliases_resolve() {
    let Some(clients) = moto_clients().await else {
        return;
    };
    let bottlerocket = clients
        .resolve_amis(&alias("bottlerocket@latest"), "1.31", now())
        .await
        .unwrap();
    // x86_64 standard and neuron share one parameter; arm64 standard; nvidia paths are absent.
    assert_eq!(bottlerocket.len(), 3, "{bottlerocket:#?}");
    let windows = clients
        .resolve_amis(&alias("windows2022@latest"), "1.31", now())
        .await
        .unwrap();
    assert_eq!(windows.len(), 1);
    assert!(
        windows[0]
            .requirements
            .iter()
            .any(|r| r.key == "kubernetes.io/os" && r.values == ["windows"])
    );
}

#[tokio::test]
async fn unsupported_or_unpublished_aliases_say_why() {
    let Some(clients) = moto_clients().await else {
        return;
    };
    let err = clients
        .resolve_amis(&alias("al2@latest"), "1.33", now())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::UnsupportedAlias { .. }), "{err:?}");
    // No parameters exist for a pinned release the launcher does not publish.
    let err = clients
        .resolve_amis(&alias("al2023@v20200101"), "1.32", now())
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "failed to discover any AMIs for alias al2023@v20200101 (kubernetes 1.32)"
    );
}

#[tokio::test]
async fn id_terms_resolve_through_describe_images() {
    let Some(clients) = moto_clients().await else {
        return;
    };
    let x86 = ssm_value(
        &clients,
        "/aws/service/eks/optimized-ami/1.32/amazon-linux-2023/x86_64/standard/recommended/image_id",
    )
    .await;
    let amis = clients
        .resolve_amis(
            &[AmiSelectorTerm {
                id: Some(x86.clone()),
                ..Default::default()
            }],
            "1.32",
            now(),
        )
        .await
        .unwrap();
    assert_eq!(amis.len(), 1);
    assert_eq!(amis[0].id, x86);
    assert_eq!(
        amis[0].requirements.len(),
        1,
        "non-alias AMIs only carry the architecture"
    );
    let err = clients
        .resolve_amis(
            &[AmiSelectorTerm {
                id: Some("ami-0000000000000dead".into()),
                ..Default::default()
            }],
            "1.32",
            now(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "no AMI matches id ami-0000000000000dead");
}
