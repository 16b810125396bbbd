//! Pure half of AMI resolution (`providers/amifamily`): alias → public SSM parameter paths with the
//! requirements of each variant, and the choice of one AMI per requirement set. The SDK half lives in
//! [`crate::resolve`].

use std::cmp::Ordering;
use std::collections::BTreeMap;

use karpenter_api::v1::{AmiStatus, NodeSelectorRequirementWithMinValues};
use karpenter_api::well_known::{
    ARCH_LABEL, AWS_INSTANCE_ACCELERATOR_COUNT_LABEL, AWS_INSTANCE_GPU_COUNT_LABEL, OS_LABEL,
    WINDOWS_BUILD_LABEL,
};

use crate::Error;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AliasFamily {
    Al2,
    Al2023,
    Bottlerocket,
    Windows2019,
    Windows2022,
    Windows2025,
}

/// A parsed `family@version` alias; `version` is `latest` or a release such as `v20240625`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Alias {
    pub family: AliasFamily,
    pub version: String,
}

impl Alias {
    pub fn parse(alias: &str) -> Result<Self, Error> {
        let unsupported = |why: &str| Error::UnsupportedAlias {
            message: format!("alias {alias:?} {why}"),
        };
        let (family, version) = alias
            .split_once('@')
            .ok_or_else(|| unsupported("must have the form family@version"))?;
        let family = match family {
            "al2" => AliasFamily::Al2,
            "al2023" => AliasFamily::Al2023,
            "bottlerocket" => AliasFamily::Bottlerocket,
            "windows2019" => AliasFamily::Windows2019,
            "windows2022" => AliasFamily::Windows2022,
            "windows2025" => AliasFamily::Windows2025,
            _ => {
                return Err(unsupported(
                    "has an unknown family (al2023, al2, bottlerocket, windows2019, windows2022, windows2025)",
                ));
            }
        };
        if version.is_empty() || version.contains('/') {
            return Err(unsupported("has an invalid version"));
        }
        if family.windows_build().is_some() && version != "latest" {
            return Err(unsupported(
                "is invalid: Windows families only support @latest",
            ));
        }
        Ok(Self {
            family,
            version: version.to_string(),
        })
    }
}

impl AliasFamily {
    fn windows_build(self) -> Option<(&'static str, &'static str)> {
        match self {
            AliasFamily::Windows2019 => Some(("2019", "10.0.17763")),
            AliasFamily::Windows2022 => Some(("2022", "10.0.20348")),
            AliasFamily::Windows2025 => Some(("2025", "10.0.26100")),
            _ => None,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    Standard,
    Nvidia,
    Neuron,
}

/// One public SSM parameter an alias reads, with the requirements its AMI gets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AliasParameter {
    pub path: String,
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
}

/// `1.31` → 31; Kubernetes versions here are always `1.<minor>`.
fn k8s_minor(k8s_version: &str) -> Option<u32> {
    k8s_version
        .strip_prefix("1.")
        .and_then(|minor| minor.parse().ok())
}

/// The SSM parameters of `alias` for control-plane version `k8s_version` (`1.31`), as upstream's
/// `al2.go`, `al2023.go`, `bottlerocket.go`, `windows.go`.
pub fn alias_parameters(alias: &Alias, k8s_version: &str) -> Result<Vec<AliasParameter>, Error> {
    let minor = k8s_minor(k8s_version).ok_or_else(|| Error::UnsupportedAlias {
        message: format!("kubernetes version {k8s_version:?} is not of the form 1.<minor>"),
    })?;
    let k8s = k8s_version;
    let version = alias.version.as_str();
    let latest = version == "latest";
    let param = |path: String, arch: &str, variant: Variant| AliasParameter {
        path,
        requirements: variant_requirements(arch, variant),
    };
    let params = match alias.family {
        AliasFamily::Al2 => {
            if minor >= 33 {
                return Err(Error::UnsupportedAlias {
                    message: format!(
                        "alias al2@{version} is not supported on kubernetes {k8s}: AL2 AMIs end at 1.32"
                    ),
                });
            }
            let leaf = |prefix: &str| {
                if latest {
                    "recommended".to_string()
                } else {
                    format!("{prefix}-{k8s}-{version}")
                }
            };
            let base = format!("/aws/service/eks/optimized-ami/{k8s}");
            let gpu = format!(
                "{base}/amazon-linux-2-gpu/{}/image_id",
                leaf("amazon-eks-gpu-node")
            );
            vec![
                param(
                    format!("{base}/amazon-linux-2/{}/image_id", leaf("amazon-eks-node")),
                    "amd64",
                    Variant::Standard,
                ),
                param(
                    format!(
                        "{base}/amazon-linux-2-arm64/{}/image_id",
                        leaf("amazon-eks-arm64-node")
                    ),
                    "arm64",
                    Variant::Standard,
                ),
                param(gpu.clone(), "amd64", Variant::Nvidia),
                param(gpu, "amd64", Variant::Neuron),
            ]
        }
        AliasFamily::Al2023 => {
            let combos = [
                ("x86_64", "amd64", "standard", Variant::Standard),
                ("x86_64", "amd64", "nvidia", Variant::Nvidia),
                ("x86_64", "amd64", "neuron", Variant::Neuron),
                ("arm64", "arm64", "standard", Variant::Standard),
                ("arm64", "arm64", "nvidia", Variant::Nvidia),
            ];
            combos
                .into_iter()
                .map(|(ssm_arch, arch, variant_name, variant)| {
                    let leaf = if latest {
                        "recommended".to_string()
                    } else {
                        format!("amazon-eks-node-al2023-{ssm_arch}-{variant_name}-{k8s}-{version}")
                    };
                    param(
                        format!(
                            "/aws/service/eks/optimized-ami/{k8s}/amazon-linux-2023/{ssm_arch}/{variant_name}/{leaf}/image_id"
                        ),
                        arch,
                        variant,
                    )
                })
                .collect()
        }
        AliasFamily::Bottlerocket => {
            let leaf = if latest {
                "latest"
            } else {
                version.strip_prefix('v').unwrap_or(version)
            };
            let base = "/aws/service/bottlerocket";
            vec![
                param(
                    format!("{base}/aws-k8s-{k8s}/x86_64/{leaf}/image_id"),
                    "amd64",
                    Variant::Standard,
                ),
                param(
                    format!("{base}/aws-k8s-{k8s}/x86_64/{leaf}/image_id"),
                    "amd64",
                    Variant::Neuron,
                ),
                param(
                    format!("{base}/aws-k8s-{k8s}/arm64/{leaf}/image_id"),
                    "arm64",
                    Variant::Standard,
                ),
                param(
                    format!("{base}/aws-k8s-{k8s}-nvidia/x86_64/{leaf}/image_id"),
                    "amd64",
                    Variant::Nvidia,
                ),
                param(
                    format!("{base}/aws-k8s-{k8s}-nvidia/arm64/{leaf}/image_id"),
                    "arm64",
                    Variant::Nvidia,
                ),
            ]
        }
        AliasFamily::Windows2019 | AliasFamily::Windows2022 | AliasFamily::Windows2025 => {
            let Some((year, build)) = alias.family.windows_build() else {
                return Ok(Vec::new());
            };
            if alias.family == AliasFamily::Windows2025 && minor < 35 {
                return Err(Error::UnsupportedAlias {
                    message: format!(
                        "alias windows2025@{version} is not supported on kubernetes {k8s}: it needs 1.35 or newer"
                    ),
                });
            }
            vec![AliasParameter {
                path: format!(
                    "/aws/service/ami-windows-latest/Windows_Server-{year}-English-Core-EKS_Optimized-{k8s}/image_id"
                ),
                requirements: sorted_requirements(vec![
                    requirement(ARCH_LABEL, "In", &["amd64"]),
                    requirement(OS_LABEL, "In", &["windows"]),
                    requirement(WINDOWS_BUILD_LABEL, "In", &[build]),
                ]),
            }]
        }
    };
    Ok(params)
}

fn requirement(key: &str, operator: &str, values: &[&str]) -> NodeSelectorRequirementWithMinValues {
    NodeSelectorRequirementWithMinValues {
        key: key.to_string(),
        operator: operator.to_string(),
        values: values.iter().map(|v| v.to_string()).collect(),
        min_values: None,
    }
}

/// Upstream orders AMI requirements by key length, then key.
fn sorted_requirements(
    mut requirements: Vec<NodeSelectorRequirementWithMinValues>,
) -> Vec<NodeSelectorRequirementWithMinValues> {
    requirements.sort_by(|a, b| {
        a.key
            .len()
            .cmp(&b.key.len())
            .then_with(|| a.key.cmp(&b.key))
    });
    requirements
}

/// `kubernetes.io/arch In [arch]` AND-ed with the variant's accelerator requirements.
pub fn variant_requirements(
    arch: &str,
    variant: Variant,
) -> Vec<NodeSelectorRequirementWithMinValues> {
    let mut requirements = vec![requirement(ARCH_LABEL, "In", &[arch])];
    match variant {
        Variant::Standard => {
            requirements.push(requirement(
                AWS_INSTANCE_ACCELERATOR_COUNT_LABEL,
                "DoesNotExist",
                &[],
            ));
            requirements.push(requirement(
                AWS_INSTANCE_GPU_COUNT_LABEL,
                "DoesNotExist",
                &[],
            ));
        }
        Variant::Nvidia => {
            requirements.push(requirement(AWS_INSTANCE_GPU_COUNT_LABEL, "Exists", &[]))
        }
        Variant::Neuron => requirements.push(requirement(
            AWS_INSTANCE_ACCELERATOR_COUNT_LABEL,
            "Exists",
            &[],
        )),
    }
    sorted_requirements(requirements)
}

/// Non-alias AMIs only constrain the architecture.
pub fn arch_requirements(arch: &str) -> Vec<NodeSelectorRequirementWithMinValues> {
    vec![requirement(ARCH_LABEL, "In", &[arch])]
}

/// EC2's architecture names mapped to Kubernetes' (`x86_64` → `amd64`); others are not supported.
pub fn kubernetes_arch(ec2_arch: &str) -> Option<&'static str> {
    match ec2_arch {
        "x86_64" => Some("amd64"),
        "arm64" => Some("arm64"),
        _ => None,
    }
}

/// An image as the resolver needs it, decoupled from the SDK type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageInfo {
    pub id: String,
    pub name: Option<String>,
    /// RFC 3339 as EC2 returns it (`2024-06-25T10:00:00.000Z`).
    pub creation_date: Option<String>,
    pub deprecation_time: Option<String>,
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
}

fn parse_time(raw: Option<&str>) -> Option<jiff::Timestamp> {
    raw.and_then(|t| t.parse::<jiff::Timestamp>().ok())
}

impl ImageInfo {
    fn is_deprecated(&self, now: jiff::Timestamp) -> bool {
        parse_time(self.deprecation_time.as_deref()).is_some_and(|t| t <= now)
    }

    fn created(&self) -> Option<jiff::Timestamp> {
        parse_time(self.creation_date.as_deref())
    }
}

/// One AMI per distinct requirement set (non-deprecated first, then newest, then greatest name),
/// sorted newest first then by ID, as upstream's `amifamily.AMIs`.
pub fn select_amis(images: Vec<ImageInfo>, now: jiff::Timestamp) -> Vec<AmiStatus> {
    let better = |a: &ImageInfo, b: &ImageInfo| -> Ordering {
        // Greater = preferred.
        b.is_deprecated(now)
            .cmp(&a.is_deprecated(now))
            .then_with(|| a.created().cmp(&b.created()))
            .then_with(|| a.name.cmp(&b.name))
            .then_with(|| b.id.cmp(&a.id))
    };
    let mut best: BTreeMap<String, ImageInfo> = BTreeMap::new();
    for image in images {
        let key = format!("{:?}", image.requirements);
        match best.get(&key) {
            Some(current) if better(&image, current) != Ordering::Greater => {}
            _ => {
                best.insert(key, image);
            }
        }
    }
    let mut chosen: Vec<ImageInfo> = best.into_values().collect();
    chosen.sort_by(|a, b| b.created().cmp(&a.created()).then_with(|| a.id.cmp(&b.id)));
    chosen
        .into_iter()
        .map(|image| AmiStatus {
            deprecated: Some(image.is_deprecated(now)),
            id: image.id,
            name: image.name,
            requirements: image.requirements,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(alias: &str, k8s: &str) -> Vec<String> {
        alias_parameters(&Alias::parse(alias).unwrap(), k8s)
            .unwrap()
            .into_iter()
            .map(|p| p.path)
            .collect()
    }

    #[test]
    fn al2023_latest_reads_the_recommended_parameters() {
        let paths = paths("al2023@latest", "1.31");
        assert_eq!(paths.len(), 5);
        assert_eq!(
            paths[0],
            "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/standard/recommended/image_id"
        );
        assert!(paths.contains(
            &"/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/arm64/nvidia/recommended/image_id"
                .to_string()
        ));
    }

    #[test]
    fn pinned_versions_name_the_release() {
        assert_eq!(
            paths("al2023@v20240625", "1.30")[0],
            "/aws/service/eks/optimized-ami/1.30/amazon-linux-2023/x86_64/standard/amazon-eks-node-al2023-x86_64-standard-1.30-v20240625/image_id"
        );
        assert_eq!(
            paths("bottlerocket@v1.20.0", "1.30")[0],
            "/aws/service/bottlerocket/aws-k8s-1.30/x86_64/1.20.0/image_id"
        );
        assert_eq!(
            paths("al2@v20240625", "1.30")[1],
            "/aws/service/eks/optimized-ami/1.30/amazon-linux-2-arm64/amazon-eks-arm64-node-1.30-v20240625/image_id"
        );
    }

    #[test]
    fn windows_alias_carries_os_and_build() {
        let params =
            alias_parameters(&Alias::parse("windows2022@latest").unwrap(), "1.31").unwrap();
        assert_eq!(
            params[0].path,
            "/aws/service/ami-windows-latest/Windows_Server-2022-English-Core-EKS_Optimized-1.31/image_id"
        );
        let keys: Vec<&str> = params[0]
            .requirements
            .iter()
            .map(|r| r.key.as_str())
            .collect();
        assert_eq!(keys, [OS_LABEL, ARCH_LABEL, WINDOWS_BUILD_LABEL]);
        assert_eq!(params[0].requirements[2].values, ["10.0.20348"]);
    }

    #[test]
    fn unsupported_aliases_are_rejected_with_the_reason() {
        let err = alias_parameters(&Alias::parse("al2@latest").unwrap(), "1.33").unwrap_err();
        assert!(err.to_string().contains("AL2 AMIs end at 1.32"), "{err}");
        assert!(alias_parameters(&Alias::parse("al2@latest").unwrap(), "1.32").is_ok());
        let err =
            alias_parameters(&Alias::parse("windows2025@latest").unwrap(), "1.34").unwrap_err();
        assert!(err.to_string().contains("1.35"), "{err}");
        assert!(alias_parameters(&Alias::parse("windows2025@latest").unwrap(), "1.35").is_ok());
        assert!(Alias::parse("ubuntu@latest").is_err());
        assert!(Alias::parse("al2023").is_err());
        assert!(Alias::parse("windows2022@v1").is_err());
    }

    #[test]
    fn standard_variant_excludes_accelerators() {
        let reqs = variant_requirements("arm64", Variant::Standard);
        let described: Vec<(&str, &str)> = reqs
            .iter()
            .map(|r| (r.key.as_str(), r.operator.as_str()))
            .collect();
        assert_eq!(
            described,
            [
                (ARCH_LABEL, "In"),
                (AWS_INSTANCE_GPU_COUNT_LABEL, "DoesNotExist"),
                (AWS_INSTANCE_ACCELERATOR_COUNT_LABEL, "DoesNotExist"),
            ]
        );
    }

    fn image(id: &str, created: &str, deprecated: Option<&str>, arch: &str) -> ImageInfo {
        ImageInfo {
            id: id.into(),
            name: Some(format!("name-{id}")),
            creation_date: Some(created.into()),
            deprecation_time: deprecated.map(str::to_string),
            requirements: variant_requirements(arch, Variant::Standard),
        }
    }

    #[test]
    fn newest_non_deprecated_image_wins_per_requirement_set() {
        let now: jiff::Timestamp = "2025-01-01T00:00:00Z".parse().unwrap();
        let amis = select_amis(
            vec![
                image("ami-old", "2024-01-01T00:00:00.000Z", None, "amd64"),
                image("ami-new", "2024-06-01T00:00:00.000Z", None, "amd64"),
                image(
                    "ami-newest-deprecated",
                    "2024-12-01T00:00:00.000Z",
                    Some("2024-12-15T00:00:00.000Z"),
                    "amd64",
                ),
                image("ami-arm", "2023-01-01T00:00:00.000Z", None, "arm64"),
            ],
            now,
        );
        let ids: Vec<&str> = amis.iter().map(|a| a.id.as_str()).collect();
        assert_eq!(ids, ["ami-new", "ami-arm"]);
        assert_eq!(amis[0].deprecated, Some(false));
    }

    #[test]
    fn a_deprecated_image_is_kept_when_nothing_else_exists() {
        let now: jiff::Timestamp = "2025-01-01T00:00:00Z".parse().unwrap();
        let amis = select_amis(
            vec![image(
                "ami-d",
                "2024-01-01T00:00:00.000Z",
                Some("2024-02-01T00:00:00.000Z"),
                "amd64",
            )],
            now,
        );
        assert_eq!(amis.len(), 1);
        assert_eq!(amis[0].deprecated, Some(true));
    }
}
