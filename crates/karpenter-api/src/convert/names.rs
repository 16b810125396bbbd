//! Two documents of one conversion must not produce the same v1 object: the API server keeps one
//! NodePool (or EC2NodeClass, NodeClaim) per name, so applying the output would silently lose the
//! other and `karpenter validate` refuses it. A later producer of a taken name fails, naming both.

use std::collections::BTreeMap;

use super::{ConvertError, Input, Output, V1Object, text};
use crate::validation::v1_kind;

impl V1Object {
    /// The object's kind and `metadata.name` (empty when missing).
    pub fn kind_and_name(&self) -> (&'static str, &str) {
        let (kind, name) = match self {
            Self::NodePool(o) => ("NodePool", &o.metadata.name),
            Self::NodeClaim(o) => ("NodeClaim", &o.metadata.name),
            Self::EC2NodeClass(o) => ("EC2NodeClass", &o.metadata.name),
        };
        (kind, name.as_deref().unwrap_or_default())
    }
}

/// Who produced a v1 object: `FILE:DOCUMENT Kind/name` of the input, and whether it was converted
/// (a v1 object passed through as it is only conflicts with a converted one: two v1 objects with
/// one name are `karpenter validate`'s to report).
struct Producer {
    described: String,
    converted: bool,
}

fn describe(input: &Input) -> String {
    format!(
        "{}:{} {}/{}",
        input.source,
        input.index,
        text(&input.value, "/kind"),
        text(&input.value, "/metadata/name")
    )
}

/// The v1 objects `output` stands for: the converted ones, or the input itself when it is a v1
/// object passed through.
fn produced(input: &Input, output: &Output) -> Vec<(String, String)> {
    match output {
        Output::Converted(objects) => objects
            .iter()
            .map(|o| {
                let (kind, name) = o.kind_and_name();
                (kind.to_string(), name.to_string())
            })
            .collect(),
        Output::PassThrough => {
            let (api_version, kind) = (
                text(&input.value, "/apiVersion"),
                text(&input.value, "/kind"),
            );
            if v1_kind(&api_version, &kind).is_some() {
                vec![(kind, text(&input.value, "/metadata/name"))]
            } else {
                Vec::new()
            }
        }
        Output::Failed(_) => Vec::new(),
    }
}

/// Replaces the output of every document that produces a v1 object whose kind and name an
/// earlier document (converted or not) already produced, when either of the two was converted.
pub(super) fn refuse_duplicate_names(inputs: &[Input], outputs: Vec<Output>) -> Vec<Output> {
    let mut producers: BTreeMap<(String, String), Producer> = BTreeMap::new();
    inputs
        .iter()
        .zip(outputs)
        .map(|(input, output)| {
            let converted = matches!(output, Output::Converted(_));
            let mut clashes = Vec::new();
            for (kind, name) in produced(input, &output) {
                if name.is_empty() {
                    continue;
                }
                match producers.get(&(kind.clone(), name.clone())) {
                    Some(first) if first.converted || converted => {
                        clashes.push(format!(
                            "{kind} {name:?} is also produced by {}",
                            first.described
                        ));
                    }
                    Some(_) => {}
                    None => {
                        producers.insert(
                            (kind, name),
                            Producer {
                                described: describe(input),
                                converted,
                            },
                        );
                    }
                }
            }
            if clashes.is_empty() {
                output
            } else {
                Output::Failed(ConvertError::NameClash { clashes })
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::super::convert;
    use super::*;

    fn inputs(yaml: &[&str]) -> Vec<Input> {
        yaml.iter()
            .enumerate()
            .map(|(i, doc)| Input {
                source: "f.yaml".into(),
                index: i + 1,
                value: serde_saphyr::from_str::<Value>(doc).unwrap(),
            })
            .collect()
    }

    const PROVISIONER_WITH_INLINE_PROVIDER: &str = "apiVersion: karpenter.sh/v1alpha5\nkind: Provisioner\nmetadata: {name: default}\nspec:\n  provider:\n    instanceProfile: p\n    subnetSelector: {karpenter.sh/discovery: c}\n    securityGroupSelector: {karpenter.sh/discovery: c}\n";
    const NODE_TEMPLATE: &str = "apiVersion: karpenter.k8s.aws/v1alpha1\nkind: AWSNodeTemplate\nmetadata: {name: default}\nspec:\n  instanceProfile: p\n  subnetSelector: {karpenter.sh/discovery: c}\n  securityGroupSelector: {karpenter.sh/discovery: c}\n";
    const V1BETA1_NODEPOOL: &str = "apiVersion: karpenter.sh/v1beta1\nkind: NodePool\nmetadata: {name: default}\nspec:\n  template:\n    spec:\n      nodeClassRef: {name: default}\n";
    const V1_NODEPOOL: &str = "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: default}\nspec:\n  template:\n    spec:\n      requirements: []\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n";

    fn failure(output: &Output) -> String {
        match output {
            Output::Failed(reason) => reason.to_string(),
            other => panic!("expected a failure, got {other:?}"),
        }
    }

    #[test]
    fn two_documents_converting_to_one_ec2nodeclass_name_fail_naming_both() {
        let inputs = inputs(&[PROVISIONER_WITH_INLINE_PROVIDER, NODE_TEMPLATE]);
        let (outputs, _) = convert(&inputs);
        assert!(matches!(outputs[0], Output::Converted(_)), "{outputs:?}");
        let reason = failure(&outputs[1]);
        assert!(
            reason.starts_with(
                "EC2NodeClass \"default\" is also produced by f.yaml:1 Provisioner/default"
            ),
            "{reason}"
        );
    }

    #[test]
    fn a_provisioner_and_a_v1beta1_nodepool_of_one_name_clash() {
        let (outputs, _) = convert(&inputs(&[
            NODE_TEMPLATE,
            V1BETA1_NODEPOOL,
            PROVISIONER_WITH_INLINE_PROVIDER,
        ]));
        // The Provisioner makes NodePool "default" (taken by the v1beta1 NodePool) and
        // EC2NodeClass "default" (taken by the AWSNodeTemplate): both are named.
        let reason = failure(&outputs[2]);
        assert!(
            reason.contains("NodePool \"default\" is also produced by f.yaml:2 NodePool/default"),
            "{reason}"
        );
        assert!(
            reason.contains(
                "EC2NodeClass \"default\" is also produced by f.yaml:1 AWSNodeTemplate/default"
            ),
            "{reason}"
        );
    }

    #[test]
    fn a_v1_object_passed_through_clashes_with_a_converted_one() {
        let (outputs, _) = convert(&inputs(&[V1_NODEPOOL, V1BETA1_NODEPOOL]));
        assert!(matches!(outputs[0], Output::PassThrough));
        assert!(failure(&outputs[1]).contains("f.yaml:1 NodePool/default"));
    }

    #[test]
    fn v1_objects_passed_through_are_left_to_validate_and_distinct_names_pass() {
        let (outputs, _) = convert(&inputs(&[V1_NODEPOOL, V1_NODEPOOL]));
        assert!(outputs.iter().all(|o| matches!(o, Output::PassThrough)));
        let (outputs, _) = convert(&inputs(&[PROVISIONER_WITH_INLINE_PROVIDER]));
        assert!(matches!(&outputs[0], Output::Converted(objects) if objects.len() == 2));
    }
}
