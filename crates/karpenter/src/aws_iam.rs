//! What karpenter-rs needs from IAM, as documents a person deploys (`karpenter aws iam`): the
//! controller policy (upstream's statements and tag conditions, scoped to one cluster) and the
//! CloudFormation template of the getting-started guides (node role, controller policy,
//! interruption queue and its EventBridge rules).
//!
//! Both come from one statement list ([`controller_policy`]) filled with a [`PolicyScope`]: concrete
//! values for `-o json`, CloudFormation substitutions (`${AWS::Region}`, ...) for the template, so
//! the two can never disagree. A test derives every AWS operation the aws provider's code
//! (`crates/karpenter-aws/src`) calls and checks that this policy allows it.
//!
//! It is plain JSON and lives in the binary, not in `karpenter-aws`: `aws iam` works on a build
//! without the `aws` feature, which never compiles the AWS SDK.

use serde_json::{Value, json};

/// Where the policy applies. Each field is inserted verbatim into ARNs and conditions, so it can be
/// a concrete value (`aws`, `eu-west-1`, `123456789012`) or a CloudFormation substitution.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PolicyScope {
    pub partition: String,
    /// `None`: any region. ARNs then say `*`, and the region conditions are left out: IAM compares
    /// `StringEquals` values literally, so `"aws:RequestedRegion": "*"` would match no request.
    pub region: Option<String>,
    pub account_id: String,
    pub cluster_name: String,
    /// The interruption queue's ARN.
    pub interruption_queue_arn: String,
}

impl PolicyScope {
    /// A scope with concrete values; `account_id` may be `*` when unknown (it only appears in
    /// ARNs), an unknown region is `None`.
    pub fn concrete(
        partition: &str,
        region: Option<&str>,
        account_id: &str,
        cluster_name: &str,
        interruption_queue: &str,
    ) -> Self {
        let arn_region = region.unwrap_or("*");
        PolicyScope {
            partition: partition.to_string(),
            region: region.map(str::to_string),
            account_id: account_id.to_string(),
            cluster_name: cluster_name.to_string(),
            interruption_queue_arn: format!(
                "arn:{partition}:sqs:{arn_region}:{account_id}:{interruption_queue}"
            ),
        }
    }

    /// The scope inside the CloudFormation template: pseudo parameters, the `ClusterName`
    /// parameter and the queue resource's ARN, all resolved by `Fn::Sub`.
    pub fn cloudformation() -> Self {
        PolicyScope {
            partition: "${AWS::Partition}".to_string(),
            region: Some("${AWS::Region}".to_string()),
            account_id: "${AWS::AccountId}".to_string(),
            cluster_name: "${ClusterName}".to_string(),
            interruption_queue_arn: "${KarpenterInterruptionQueue.Arn}".to_string(),
        }
    }

    /// The region as an ARN segment.
    fn arn_region(&self) -> &str {
        self.region.as_deref().unwrap_or("*")
    }

    fn ec2_arn(&self, resource: &str) -> String {
        format!(
            "arn:{}:ec2:{}:*:{resource}/*",
            self.partition,
            self.arn_region()
        )
    }

    /// `conditions` (a map of condition keys to values, for `StringEquals`) with `key: region`
    /// added when the region is known; nothing is added for any region.
    fn with_region(&self, mut conditions: Value, keys: &[&str]) -> Value {
        if let (Some(region), Some(map)) = (&self.region, conditions.as_object_mut()) {
            for key in keys {
                map.insert((*key).to_string(), Value::String(region.clone()));
            }
        }
        conditions
    }

    fn instance_profiles(&self) -> String {
        format!(
            "arn:{}:iam::{}:instance-profile/*",
            self.partition, self.account_id
        )
    }
}

/// The instance profiles' region tags (the provider tags each profile with its region).
const REQUEST_REGION_TAG: &str = "aws:RequestTag/topology.kubernetes.io/region";
const RESOURCE_REGION_TAG: &str = "aws:ResourceTag/topology.kubernetes.io/region";

/// The node role's name for a cluster (the EC2NodeClass `spec.role` of the guides).
pub fn node_role_name(cluster: &str) -> String {
    format!("KarpenterNodeRole-{cluster}")
}

/// The controller policy's name for a cluster (the guides attach it to the IRSA role).
pub fn controller_policy_name(cluster: &str) -> String {
    format!("KarpenterControllerPolicy-{cluster}")
}

/// The controller's IAM policy document: least privilege, every mutating action conditioned on
/// this cluster's ownership tags, reads and instance profiles restricted to the region when it is
/// known.
pub fn controller_policy(scope: &PolicyScope) -> Value {
    let cluster = &scope.cluster_name;
    let mut regional_reads = json!({
        "Sid": "AllowRegionalReadActions",
        "Effect": "Allow",
        "Resource": "*",
        "Action": [
            "ec2:DescribeCapacityReservations",
            "ec2:DescribeImages",
            "ec2:DescribeInstances",
            "ec2:DescribeInstanceStatus",
            "ec2:DescribeInstanceTypeOfferings",
            "ec2:DescribeInstanceTypes",
            "ec2:DescribeLaunchTemplates",
            "ec2:DescribeLaunchTemplateVersions",
            "ec2:DescribePlacementGroups",
            "ec2:DescribeSecurityGroups",
            "ec2:DescribeSpotPriceHistory",
            "ec2:DescribeSubnets"
        ]
    });
    if let (Some(region), Some(statement)) = (&scope.region, regional_reads.as_object_mut()) {
        statement.insert(
            "Condition".to_string(),
            json!({ "StringEquals": { "aws:RequestedRegion": region } }),
        );
    }
    let owned_request_tag = format!("aws:RequestTag/kubernetes.io/cluster/{cluster}");
    let owned_resource_tag = format!("aws:ResourceTag/kubernetes.io/cluster/{cluster}");
    let tagged_at_creation = [
        "fleet",
        "instance",
        "volume",
        "network-interface",
        "launch-template",
        "spot-instances-request",
    ]
    .map(|r| scope.ec2_arn(r));
    let mut launch_targets = tagged_at_creation.to_vec();
    launch_targets.push(scope.ec2_arn("capacity-reservation"));
    json!({
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "AllowScopedEC2InstanceAccessActions",
                "Effect": "Allow",
                "Resource": [
                    format!("arn:{}:ec2:{}::image/*", scope.partition, scope.arn_region()),
                    format!("arn:{}:ec2:{}::snapshot/*", scope.partition, scope.arn_region()),
                    scope.ec2_arn("security-group"),
                    scope.ec2_arn("subnet"),
                    scope.ec2_arn("capacity-reservation"),
                ],
                "Action": ["ec2:RunInstances", "ec2:CreateFleet"]
            },
            {
                "Sid": "AllowScopedEC2LaunchTemplateAccessActions",
                "Effect": "Allow",
                "Resource": scope.ec2_arn("launch-template"),
                "Action": ["ec2:RunInstances", "ec2:CreateFleet"],
                "Condition": {
                    "StringEquals": { owned_resource_tag.clone(): "owned" },
                    "StringLike": { "aws:ResourceTag/karpenter.sh/nodepool": "*" }
                }
            },
            {
                "Sid": "AllowScopedEC2InstanceActionsWithTags",
                "Effect": "Allow",
                "Resource": launch_targets,
                "Action": ["ec2:RunInstances", "ec2:CreateFleet", "ec2:CreateLaunchTemplate"],
                "Condition": {
                    "StringEquals": {
                        owned_request_tag.clone(): "owned",
                        "aws:RequestTag/eks:eks-cluster-name": cluster
                    },
                    "StringLike": { "aws:RequestTag/karpenter.sh/nodepool": "*" }
                }
            },
            {
                "Sid": "AllowScopedResourceCreationTagging",
                "Effect": "Allow",
                "Resource": tagged_at_creation,
                "Action": "ec2:CreateTags",
                "Condition": {
                    "StringEquals": {
                        owned_request_tag.clone(): "owned",
                        "aws:RequestTag/eks:eks-cluster-name": cluster,
                        "ec2:CreateAction": ["RunInstances", "CreateFleet", "CreateLaunchTemplate"]
                    },
                    "StringLike": { "aws:RequestTag/karpenter.sh/nodepool": "*" }
                }
            },
            {
                "Sid": "AllowScopedResourceTagging",
                "Effect": "Allow",
                "Resource": scope.ec2_arn("instance"),
                "Action": "ec2:CreateTags",
                "Condition": {
                    "StringEquals": { owned_resource_tag.clone(): "owned" },
                    "StringLike": { "aws:ResourceTag/karpenter.sh/nodepool": "*" },
                    "StringEqualsIfExists": { "aws:RequestTag/eks:eks-cluster-name": cluster },
                    "ForAllValues:StringEquals": {
                        "aws:TagKeys": ["eks:eks-cluster-name", "karpenter.sh/nodeclaim", "Name"]
                    }
                }
            },
            {
                "Sid": "AllowScopedDeletion",
                "Effect": "Allow",
                "Resource": [scope.ec2_arn("instance"), scope.ec2_arn("launch-template")],
                "Action": ["ec2:TerminateInstances", "ec2:DeleteLaunchTemplate"],
                "Condition": {
                    "StringEquals": { owned_resource_tag.clone(): "owned" },
                    "StringLike": { "aws:ResourceTag/karpenter.sh/nodepool": "*" }
                }
            },
            regional_reads,
            {
                "Sid": "AllowSSMReadActions",
                "Effect": "Allow",
                "Resource": format!(
                    "arn:{}:ssm:{}::parameter/aws/service/*", scope.partition, scope.arn_region()
                ),
                // GetParameters: the provider resolves every AMI alias parameter in one call.
                "Action": ["ssm:GetParameter", "ssm:GetParameters"]
            },
            {
                "Sid": "AllowPricingReadActions",
                "Effect": "Allow",
                "Resource": "*",
                "Action": "pricing:GetProducts"
            },
            {
                "Sid": "AllowInterruptionQueueActions",
                "Effect": "Allow",
                "Resource": scope.interruption_queue_arn,
                "Action": ["sqs:DeleteMessage", "sqs:GetQueueUrl", "sqs:ReceiveMessage"]
            },
            {
                "Sid": "AllowPassingInstanceRole",
                "Effect": "Allow",
                "Resource": format!(
                    "arn:{}:iam::{}:role/{}",
                    scope.partition,
                    scope.account_id,
                    node_role_name(cluster)
                ),
                "Action": "iam:PassRole",
                "Condition": {
                    "StringEquals": {
                        "iam:PassedToService": ["ec2.amazonaws.com", "ec2.amazonaws.com.cn"]
                    }
                }
            },
            {
                "Sid": "AllowScopedInstanceProfileCreationActions",
                "Effect": "Allow",
                "Resource": scope.instance_profiles(),
                "Action": ["iam:CreateInstanceProfile"],
                "Condition": {
                    "StringEquals": scope.with_region(json!({
                        owned_request_tag.clone(): "owned",
                        "aws:RequestTag/eks:eks-cluster-name": cluster
                    }), &[REQUEST_REGION_TAG]),
                    "StringLike": { "aws:RequestTag/karpenter.k8s.aws/ec2nodeclass": "*" }
                }
            },
            {
                "Sid": "AllowScopedInstanceProfileTagActions",
                "Effect": "Allow",
                "Resource": scope.instance_profiles(),
                "Action": ["iam:TagInstanceProfile"],
                "Condition": {
                    "StringEquals": scope.with_region(json!({
                        owned_resource_tag.clone(): "owned",
                        owned_request_tag.clone(): "owned",
                        "aws:RequestTag/eks:eks-cluster-name": cluster
                    }), &[RESOURCE_REGION_TAG, REQUEST_REGION_TAG]),
                    "StringLike": {
                        "aws:ResourceTag/karpenter.k8s.aws/ec2nodeclass": "*",
                        "aws:RequestTag/karpenter.k8s.aws/ec2nodeclass": "*"
                    }
                }
            },
            {
                "Sid": "AllowScopedInstanceProfileActions",
                "Effect": "Allow",
                "Resource": scope.instance_profiles(),
                "Action": [
                    "iam:AddRoleToInstanceProfile",
                    "iam:RemoveRoleFromInstanceProfile",
                    "iam:DeleteInstanceProfile"
                ],
                "Condition": {
                    "StringEquals": scope.with_region(json!({
                        owned_resource_tag: "owned"
                    }), &[RESOURCE_REGION_TAG]),
                    "StringLike": { "aws:ResourceTag/karpenter.k8s.aws/ec2nodeclass": "*" }
                }
            },
            {
                "Sid": "AllowInstanceProfileReadActions",
                "Effect": "Allow",
                "Resource": scope.instance_profiles(),
                "Action": ["iam:GetInstanceProfile", "iam:ListInstanceProfiles"]
            },
            {
                "Sid": "AllowAPIServerEndpointDiscovery",
                "Effect": "Allow",
                "Resource": format!(
                    "arn:{}:eks:{}:{}:cluster/{cluster}",
                    scope.partition, scope.arn_region(), scope.account_id
                ),
                "Action": "eks:DescribeCluster"
            }
        ]
    })
}

#[cfg(test)]
/// Whether an `Allow` statement of `policy` names `action` (`service:Operation`), directly or
/// through a `*` wildcard. Conditions and resources are not evaluated: this answers "did we forget
/// a permission", not "is this request allowed".
pub fn allows(policy: &Value, action: &str) -> bool {
    let Some(statements) = policy.get("Statement").and_then(Value::as_array) else {
        return false;
    };
    statements
        .iter()
        .filter(|s| s.get("Effect").and_then(Value::as_str) == Some("Allow"))
        .flat_map(|s| match s.get("Action") {
            Some(Value::String(a)) => vec![a.as_str()],
            Some(Value::Array(list)) => list.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        })
        .any(|pattern| wildcard_match(pattern, action))
}

#[cfg(test)]
/// IAM's action matching: case-insensitive, `*` matches any run of characters.
fn wildcard_match(pattern: &str, action: &str) -> bool {
    let pattern = pattern.to_ascii_lowercase();
    let action = action.to_ascii_lowercase();
    let mut parts = pattern.split('*');
    let Some(first) = parts.next() else {
        return false;
    };
    let Some(mut rest) = action.strip_prefix(first) else {
        return false;
    };
    let tail: Vec<&str> = parts.collect();
    if tail.is_empty() {
        return rest.is_empty();
    }
    for (i, part) in tail.iter().enumerate() {
        if i + 1 == tail.len() {
            return rest.ends_with(part);
        }
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

fn event_rule(source: &str, detail_type: &str) -> Value {
    json!({
        "Type": "AWS::Events::Rule",
        "Properties": {
            "EventPattern": { "source": [source], "detail-type": [detail_type] },
            "Targets": [{
                "Id": "KarpenterInterruptionQueueTarget",
                "Arn": { "Fn::GetAtt": ["KarpenterInterruptionQueue", "Arn"] }
            }]
        }
    })
}

/// The CloudFormation template of the getting-started flow, with `cluster_name` as the
/// `ClusterName` parameter's default (the guides still pass `--parameter-overrides ClusterName=...`).
pub fn cloudformation_template(cluster_name: &str) -> Value {
    let policy = controller_policy(&PolicyScope::cloudformation());
    // The policy is a JSON string inside Fn::Sub, so every ${...} in it is resolved by CloudFormation.
    let policy_text = serde_json::to_string_pretty(&policy).unwrap_or_default();
    json!({
        "AWSTemplateFormatVersion": "2010-09-09",
        "Description": "Resources used by karpenter-rs (https://karpenter.sh compatible): the node role, the controller policy, the interruption queue and its EventBridge rules",
        "Parameters": {
            "ClusterName": {
                "Type": "String",
                "Description": "EKS cluster name",
                "Default": cluster_name
            }
        },
        "Resources": {
            "KarpenterNodeRole": {
                "Type": "AWS::IAM::Role",
                "Properties": {
                    "RoleName": { "Fn::Sub": node_role_name("${ClusterName}") },
                    "Path": "/",
                    "AssumeRolePolicyDocument": {
                        "Version": "2012-10-17",
                        "Statement": [{
                            "Effect": "Allow",
                            "Principal": { "Service": { "Fn::Sub": "ec2.${AWS::URLSuffix}" } },
                            "Action": "sts:AssumeRole"
                        }]
                    },
                    "ManagedPolicyArns": [
                        { "Fn::Sub": "arn:${AWS::Partition}:iam::aws:policy/AmazonEKS_CNI_Policy" },
                        { "Fn::Sub": "arn:${AWS::Partition}:iam::aws:policy/AmazonEKSWorkerNodePolicy" },
                        { "Fn::Sub": "arn:${AWS::Partition}:iam::aws:policy/AmazonEC2ContainerRegistryPullOnly" },
                        { "Fn::Sub": "arn:${AWS::Partition}:iam::aws:policy/AmazonSSMManagedInstanceCore" }
                    ]
                }
            },
            "KarpenterControllerPolicy": {
                "Type": "AWS::IAM::ManagedPolicy",
                "Properties": {
                    "ManagedPolicyName": { "Fn::Sub": controller_policy_name("${ClusterName}") },
                    "PolicyDocument": { "Fn::Sub": policy_text }
                }
            },
            "KarpenterInterruptionQueue": {
                "Type": "AWS::SQS::Queue",
                "Properties": {
                    "QueueName": { "Fn::Sub": "${ClusterName}" },
                    "MessageRetentionPeriod": 300,
                    "SqsManagedSseEnabled": true
                }
            },
            "KarpenterInterruptionQueuePolicy": {
                "Type": "AWS::SQS::QueuePolicy",
                "Properties": {
                    "Queues": [{ "Ref": "KarpenterInterruptionQueue" }],
                    "PolicyDocument": {
                        "Id": "EC2InterruptionPolicy",
                        "Statement": [
                            {
                                "Effect": "Allow",
                                "Principal": { "Service": ["events.amazonaws.com", "sqs.amazonaws.com"] },
                                "Action": "sqs:SendMessage",
                                "Resource": { "Fn::GetAtt": ["KarpenterInterruptionQueue", "Arn"] }
                            },
                            {
                                "Sid": "DenyHTTP",
                                "Effect": "Deny",
                                "Action": "sqs:*",
                                "Resource": { "Fn::GetAtt": ["KarpenterInterruptionQueue", "Arn"] },
                                "Condition": { "Bool": { "aws:SecureTransport": false } },
                                "Principal": "*"
                            }
                        ]
                    }
                }
            },
            "ScheduledChangeRule": event_rule("aws.health", "AWS Health Event"),
            "SpotInterruptionRule": event_rule("aws.ec2", "EC2 Spot Instance Interruption Warning"),
            "RebalanceRule": event_rule("aws.ec2", "EC2 Instance Rebalance Recommendation"),
            "InstanceStateChangeRule": event_rule("aws.ec2", "EC2 Instance State-change Notification")
        },
        "Outputs": {
            "NodeRoleName": { "Value": { "Ref": "KarpenterNodeRole" } },
            "ControllerPolicyArn": { "Value": { "Ref": "KarpenterControllerPolicy" } },
            "InterruptionQueueName": { "Value": { "Fn::GetAtt": ["KarpenterInterruptionQueue", "QueueName"] } }
        }
    })
}

#[cfg(test)]
/// Every AWS operation (`service:Operation`) called through an SDK client in `source`: a field
/// access to one of the clients (`.ec2`, `.ssm`, `.iam`, `.sqs`, `.pricing`, `.eks`, or the same
/// as a method `ec2()`) followed by a fluent operation call (`.describe_subnets()`), whitespace and
/// line breaks allowed in between. Used by the permission test.
pub fn sdk_operations(source: &str) -> Vec<String> {
    const CLIENTS: [(&str, &str); 6] = [
        ("ec2", "ec2"),
        ("ssm", "ssm"),
        ("iam", "iam"),
        ("sqs", "sqs"),
        ("pricing", "pricing"),
        ("eks", "eks"),
    ];
    let code: String = source
        .lines()
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n");
    let compact: String = code.chars().filter(|c| !c.is_whitespace()).collect();
    let mut found = Vec::new();
    for (field, service) in CLIENTS {
        for prefix in [
            format!(".{field}."),
            format!(".{field}()."),
            format!("{field}_client."),
        ] {
            let mut rest = compact.as_str();
            while let Some(at) = rest.find(&prefix) {
                rest = &rest[at + prefix.len()..];
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                    .collect();
                if name.is_empty() || !rest[name.len()..].starts_with('(') {
                    continue;
                }
                found.push(format!("{service}:{}", pascal_case(&name)));
            }
        }
    }
    found.sort();
    found.dedup();
    found
}

#[cfg(test)]
fn pascal_case(snake: &str) -> String {
    snake
        .split('_')
        .filter(|w| !w.is_empty())
        .map(|w| {
            let mut chars = w.chars();
            match chars.next() {
                Some(first) => first.to_ascii_uppercase().to_string() + chars.as_str(),
                None => String::new(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn rust_sources(dir: &Path, out: &mut Vec<(String, String)>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                rust_sources(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                out.push((path.display().to_string(), text));
            }
        }
    }

    /// Every SDK operation the aws provider's sources call (read from the repository: the policy
    /// is printed by this binary, the calls are made by `karpenter-aws`).
    fn provider_operations() -> Vec<(String, String)> {
        let mut sources = Vec::new();
        rust_sources(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("../karpenter-aws/src"),
            &mut sources,
        );
        let mut ops = Vec::new();
        for (file, text) in &sources {
            for op in sdk_operations(text) {
                ops.push((op, file.clone()));
            }
        }
        ops
    }

    #[test]
    fn the_policy_allows_every_operation_the_provider_calls() {
        let ops = provider_operations();
        // The provider resolves subnets, security groups and AMIs today; the scan must see them,
        // or it is not scanning what it claims to.
        for expected in [
            "ec2:DescribeSubnets",
            "ec2:DescribeSecurityGroups",
            "ssm:GetParameters",
        ] {
            assert!(
                ops.iter().any(|(op, _)| op == expected),
                "scan missed {expected}: {ops:?}"
            );
        }
        let policy = controller_policy(&PolicyScope::concrete("aws", None, "*", "demo", "demo"));
        let missing: Vec<_> = ops
            .iter()
            .filter(|(op, _)| !allows(&policy, op))
            .map(|(op, file)| format!("{op} (called in {file})"))
            .collect();
        assert!(
            missing.is_empty(),
            "the controller policy (crates/karpenter/src/aws_iam.rs) lacks: {missing:?}"
        );
    }

    #[test]
    fn the_scan_reads_chained_calls_across_lines_and_skips_comments() {
        let src = "let out = self\n    .clients\n    .ec2\n    .describe_instance_type_offerings()\n    .send();\n// self.ec2.terminate_instances()\nlet q = clients.sqs.receive_message().send();\nlet r = self.eks().describe_cluster();";
        assert_eq!(
            sdk_operations(src),
            vec![
                "ec2:DescribeInstanceTypeOfferings",
                "eks:DescribeCluster",
                "sqs:ReceiveMessage"
            ]
        );
    }

    #[test]
    fn allows_matches_lists_single_actions_and_wildcards_but_not_denies() {
        let policy = json!({"Statement": [
            {"Effect": "Allow", "Action": ["ec2:Describe*", "sqs:ReceiveMessage"]},
            {"Effect": "Allow", "Action": "pricing:GetProducts"},
            {"Effect": "Deny", "Action": "ec2:TerminateInstances"}
        ]});
        assert!(allows(&policy, "ec2:DescribeSubnets"));
        assert!(allows(&policy, "EC2:describesubnets"));
        assert!(allows(&policy, "pricing:GetProducts"));
        assert!(allows(&policy, "sqs:ReceiveMessage"));
        assert!(!allows(&policy, "sqs:DeleteMessage"));
        assert!(!allows(&policy, "ec2:TerminateInstances"));
        assert!(!allows(&policy, "ec2:CreateFleet"));
    }

    #[test]
    fn every_upstream_permission_is_granted() {
        // karpenter-aws.md §8.3: the operations upstream's v1.14 controller calls.
        let policy = controller_policy(&PolicyScope::concrete("aws", None, "*", "demo", "demo"));
        for op in [
            "ec2:DescribeInstanceTypes",
            "ec2:DescribeInstanceTypeOfferings",
            "ec2:DescribeSubnets",
            "ec2:DescribeSecurityGroups",
            "ec2:DescribeImages",
            "ec2:DescribeLaunchTemplates",
            "ec2:CreateLaunchTemplate",
            "ec2:DeleteLaunchTemplate",
            "ec2:CreateFleet",
            "ec2:RunInstances",
            "ec2:DescribeInstances",
            "ec2:TerminateInstances",
            "ec2:CreateTags",
            "ec2:DescribeSpotPriceHistory",
            "ec2:DescribeInstanceStatus",
            "ec2:DescribeCapacityReservations",
            "ec2:DescribePlacementGroups",
            "iam:GetInstanceProfile",
            "iam:CreateInstanceProfile",
            "iam:TagInstanceProfile",
            "iam:AddRoleToInstanceProfile",
            "iam:RemoveRoleFromInstanceProfile",
            "iam:DeleteInstanceProfile",
            "iam:ListInstanceProfiles",
            "iam:PassRole",
            "ssm:GetParameter",
            "pricing:GetProducts",
            "eks:DescribeCluster",
            "sqs:GetQueueUrl",
            "sqs:ReceiveMessage",
            "sqs:DeleteMessage",
        ] {
            assert!(allows(&policy, op), "{op} not allowed");
        }
    }

    #[test]
    fn mutations_are_scoped_to_the_cluster() {
        let policy = controller_policy(&PolicyScope::concrete(
            "aws-cn",
            Some("cn-north-1"),
            "123456789012",
            "prod",
            "prod-queue",
        ));
        let text = policy.to_string();
        assert!(text.contains("aws:ResourceTag/kubernetes.io/cluster/prod"));
        assert!(text.contains("arn:aws-cn:iam::123456789012:role/KarpenterNodeRole-prod"));
        assert!(text.contains("arn:aws-cn:sqs:cn-north-1:123456789012:prod-queue"));
        assert!(text.contains("arn:aws-cn:eks:cn-north-1:123456789012:cluster/prod"));
        for statement in policy["Statement"].as_array().unwrap() {
            let actions = statement["Action"].to_string();
            let mutating = [
                "Terminate",
                "Delete",
                "Create",
                "RunInstances",
                "AddRole",
                "RemoveRole",
            ]
            .iter()
            .any(|verb| actions.contains(verb));
            let sqs = actions.contains("sqs:");
            if mutating && !sqs {
                assert!(
                    statement["Condition"]
                        .to_string()
                        .contains("kubernetes.io/cluster/prod")
                        || statement["Sid"] == "AllowScopedEC2InstanceAccessActions",
                    "unscoped mutation: {statement}"
                );
            }
        }
    }

    #[test]
    fn the_template_has_the_guides_resources_and_every_reference_resolves() {
        let template = cloudformation_template("demo");
        let resources = template["Resources"].as_object().unwrap();
        for name in [
            "KarpenterNodeRole",
            "KarpenterControllerPolicy",
            "KarpenterInterruptionQueue",
            "KarpenterInterruptionQueuePolicy",
            "ScheduledChangeRule",
            "SpotInterruptionRule",
            "RebalanceRule",
            "InstanceStateChangeRule",
        ] {
            assert!(resources.contains_key(name), "missing {name}");
        }
        assert_eq!(template["Parameters"]["ClusterName"]["Default"], "demo");
        // Every ${X} in a Fn::Sub is a parameter, a pseudo parameter or Resource.Attribute.
        let text = template.to_string();
        let mut rest = text.as_str();
        while let Some(at) = rest.find("${") {
            rest = &rest[at + 2..];
            let end = rest.find('}').unwrap();
            let var = &rest[..end];
            let root = var.split('.').next().unwrap();
            assert!(
                var.starts_with("AWS::") || root == "ClusterName" || resources.contains_key(root),
                "unresolved ${{{var}}}"
            );
        }
        // The embedded policy parses back to the same document.
        let sub = template["Resources"]["KarpenterControllerPolicy"]["Properties"]
            ["PolicyDocument"]["Fn::Sub"]
            .as_str()
            .unwrap();
        let parsed: Value = serde_json::from_str(sub).unwrap();
        assert_eq!(parsed, controller_policy(&PolicyScope::cloudformation()));
    }
}
