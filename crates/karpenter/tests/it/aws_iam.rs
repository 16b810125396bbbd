//! `karpenter aws iam`: the policy printed as JSON, and the CloudFormation template checked by the
//! real linter (PyPI `cfn-lint`, in the `.venv-cfn` that `./scripts/test.sh` installs) — the template
//! the getting-started guide deploys with `aws cloudformation deploy`. Every policy it prints (each
//! `-o json` variant and the template's) is linted by PyPI's `parliament` (`.venv-parliament`) and
//! by a check of the condition operators parliament does not make (a wildcard under an exact-match
//! operator matches nothing), and the JSON and template policies agree statement by statement.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use serde_json::{Map, Value};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn karpenter(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .args(args)
        .env_remove("CLUSTER_NAME")
        .output()
        .unwrap()
}

#[test]
fn json_is_the_policy_scoped_to_the_cluster() {
    let out = karpenter(&[
        "aws",
        "iam",
        "--cluster-name",
        "demo",
        "--region",
        "eu-west-1",
        "--account-id",
        "123456789012",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let policy: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(policy["Version"], "2012-10-17");
    let text = policy.to_string();
    assert!(text.contains("arn:aws:sqs:eu-west-1:123456789012:demo"));
    assert!(text.contains("arn:aws:iam::123456789012:role/KarpenterNodeRole-demo"));
    assert!(text.contains("aws:ResourceTag/kubernetes.io/cluster/demo"));
    let create_fleet = policy["Statement"]
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s["Action"].to_string().contains("\"ec2:CreateFleet\""));
    assert!(create_fleet, "{policy}");
}

#[test]
fn cluster_name_is_required_and_named() {
    let out = karpenter(&["aws", "iam"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--cluster-name"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn cloudformation_template_passes_cfn_lint() {
    let out = karpenter(&[
        "aws",
        "iam",
        "--cluster-name",
        "demo",
        "-o",
        "cloudformation",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    for resource in [
        "KarpenterNodeRole:",
        "KarpenterControllerPolicy:",
        "KarpenterInterruptionQueue:",
        "SpotInterruptionRule:",
    ] {
        assert!(text.contains(resource), "missing {resource}");
    }
    let lint = repo().join(".venv-cfn/bin/cfn-lint");
    assert!(
        lint.exists(),
        "{} is missing: run ./scripts/test.sh once (it installs cfn-lint into .venv-cfn/)",
        lint.display()
    );
    let dir = std::env::temp_dir().join(format!("karpenter-cfn-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("karpenter.yaml");
    std::fs::write(&file, &text).unwrap();
    let out = Command::new(&lint)
        .arg("--regions")
        .arg("us-east-1")
        .arg("--")
        .arg(&file)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "cfn-lint refused the template:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// One `-o json` variant and the values its CloudFormation counterpart is resolved with.
struct Variant {
    partition: &'static str,
    region: Option<&'static str>,
    account_id: Option<&'static str>,
    interruption_queue: Option<&'static str>,
}

const CLUSTER: &str = "demo";

/// Every shape `-o json` takes: no region or account, both, another partition with its own queue.
const VARIANTS: [Variant; 4] = [
    Variant {
        partition: "aws",
        region: None,
        account_id: None,
        interruption_queue: None,
    },
    Variant {
        partition: "aws",
        region: Some("eu-west-1"),
        account_id: Some("123456789012"),
        interruption_queue: None,
    },
    Variant {
        partition: "aws",
        region: None,
        account_id: Some("123456789012"),
        interruption_queue: Some("karpenter-events"),
    },
    Variant {
        partition: "aws-cn",
        region: Some("cn-north-1"),
        account_id: Some("123456789012"),
        interruption_queue: None,
    },
];

impl Variant {
    fn json_policy(&self) -> Value {
        let mut args = vec![
            "aws",
            "iam",
            "--cluster-name",
            CLUSTER,
            "--partition",
            self.partition,
        ];
        if let Some(region) = self.region {
            args.extend(["--region", region]);
        }
        if let Some(account) = self.account_id {
            args.extend(["--account-id", account]);
        }
        if let Some(queue) = self.interruption_queue {
            args.extend(["--interruption-queue", queue]);
        }
        let out = karpenter(&args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// The template's policy with CloudFormation's substitutions made as a stack in this
    /// partition, region and account would make them; for any region (`None`) the ARNs say `*` and
    /// the region conditions go, as `-o json` leaves them out.
    fn resolved_template_policy(&self) -> Value {
        let region = self.region.unwrap_or("*");
        let account = self.account_id.unwrap_or("*");
        let queue = self.interruption_queue.unwrap_or(CLUSTER);
        let text = template_policy_text()
            .replace("${AWS::Partition}", self.partition)
            .replace("${AWS::Region}", region)
            .replace("${AWS::AccountId}", account)
            .replace("${ClusterName}", CLUSTER)
            .replace(
                "${KarpenterInterruptionQueue.Arn}",
                &format!("arn:{}:sqs:{region}:{account}:{queue}", self.partition),
            );
        let mut policy: Value = serde_json::from_str(&text).unwrap();
        if self.region.is_none() {
            remove_region_conditions(&mut policy);
        }
        policy
    }
}

const REGION_CONDITION_KEYS: [&str; 3] = [
    "aws:RequestedRegion",
    "aws:RequestTag/topology.kubernetes.io/region",
    "aws:ResourceTag/topology.kubernetes.io/region",
];

fn remove_region_conditions(policy: &mut Value) {
    for statement in policy["Statement"].as_array_mut().unwrap() {
        let statement = statement.as_object_mut().unwrap();
        let Some(Value::Object(condition)) = statement.get_mut("Condition") else {
            continue;
        };
        for block in condition.values_mut() {
            let block = block.as_object_mut().unwrap();
            block.retain(|key, _| !REGION_CONDITION_KEYS.contains(&key.as_str()));
        }
        condition.retain(|_, block| block.as_object().is_some_and(|b| !b.is_empty()));
        if condition.is_empty() {
            statement.remove("Condition");
        }
    }
}

/// The `Fn::Sub` text of the template's controller policy.
fn template_policy_text() -> String {
    let out = karpenter(&[
        "aws",
        "iam",
        "--cluster-name",
        CLUSTER,
        "-o",
        "cloudformation",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let template: Value = serde_saphyr::from_slice(&out.stdout).unwrap();
    template["Resources"]["KarpenterControllerPolicy"]["Properties"]["PolicyDocument"]["Fn::Sub"]
        .as_str()
        .unwrap()
        .to_string()
}

fn statements(policy: &Value) -> &Vec<Value> {
    policy["Statement"].as_array().unwrap()
}

#[test]
fn the_json_and_template_policies_agree_statement_by_statement() {
    for variant in &VARIANTS {
        let json = variant.json_policy();
        let template = variant.resolved_template_policy();
        let sids =
            |p: &Value| -> Vec<Value> { statements(p).iter().map(|s| s["Sid"].clone()).collect() };
        assert_eq!(sids(&json), sids(&template), "{:?}", variant.region);
        for (printed, deployed) in statements(&json).iter().zip(statements(&template)) {
            assert_eq!(
                printed, deployed,
                "statement {} differs between -o json (left) and -o cloudformation (right) for {} {:?} {:?}",
                printed["Sid"], variant.partition, variant.region, variant.account_id
            );
        }
        assert_eq!(json["Version"], template["Version"]);
    }
}

#[test]
fn without_a_region_the_policy_has_no_region_condition() {
    let policy = VARIANTS[0].json_policy();
    let text = policy.to_string();
    for key in REGION_CONDITION_KEYS {
        assert!(!text.contains(key), "{key} in {policy:#}");
    }
    // The reads are still granted, in every region.
    let reads = statements(&policy)
        .iter()
        .find(|s| s["Sid"] == "AllowRegionalReadActions")
        .unwrap();
    assert!(reads.get("Condition").is_none(), "{reads}");
    // With a region, each condition names it.
    let policy = VARIANTS[1].json_policy();
    let text = policy.to_string();
    for key in REGION_CONDITION_KEYS {
        assert!(
            text.contains(&format!("\"{key}\":\"eu-west-1\"")),
            "{key} in {policy:#}"
        );
    }
}

#[test]
fn a_wildcard_region_is_refused() {
    let out = karpenter(&["aws", "iam", "--cluster-name", CLUSTER, "--region", "*"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("omit --region for any region"), "{stderr}");
}

/// IAM's condition operators, without the `ForAllValues:`/`ForAnyValue:` set prefixes and the
/// `IfExists` suffix.
const CONDITION_OPERATORS: [&str; 25] = [
    "StringEquals",
    "StringNotEquals",
    "StringEqualsIgnoreCase",
    "StringNotEqualsIgnoreCase",
    "StringLike",
    "StringNotLike",
    "NumericEquals",
    "NumericNotEquals",
    "NumericLessThan",
    "NumericLessThanEquals",
    "NumericGreaterThan",
    "NumericGreaterThanEquals",
    "DateEquals",
    "DateNotEquals",
    "DateLessThan",
    "DateLessThanEquals",
    "DateGreaterThan",
    "DateGreaterThanEquals",
    "Bool",
    "BinaryEquals",
    "IpAddress",
    "NotIpAddress",
    "ArnEquals",
    "ArnLike",
    "Null",
];

/// What is wrong with a policy's condition operators: unknown operators, and `*` or `?` under an
/// operator that compares literally (IAM does not expand them there, so the condition matches no
/// request). parliament checks neither.
fn condition_operator_problems(policy: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    for statement in statements(policy) {
        let sid = statement["Sid"].as_str().unwrap_or("?");
        let Some(condition) = statement.get("Condition") else {
            continue;
        };
        for (operator, block) in condition.as_object().unwrap() {
            let base = operator
                .trim_start_matches("ForAllValues:")
                .trim_start_matches("ForAnyValue:");
            let base = base.strip_suffix("IfExists").unwrap_or(base);
            if !CONDITION_OPERATORS.contains(&base)
                && !["ArnNotEquals", "ArnNotLike"].contains(&base)
            {
                problems.push(format!("{sid}: unknown condition operator {operator}"));
                continue;
            }
            let literal = base.starts_with("String") && !base.contains("Like");
            for (key, values) in block.as_object().unwrap() {
                let values = match values {
                    Value::Array(list) => list.clone(),
                    one => vec![one.clone()],
                };
                for value in values.iter().filter_map(Value::as_str) {
                    if literal && value.contains(['*', '?']) {
                        problems.push(format!(
                            "{sid}: {operator} {{{key}: {value:?}}} compares literally and matches nothing; use StringLike or leave it out"
                        ));
                    }
                }
            }
        }
    }
    problems
}

#[test]
fn the_operator_check_finds_a_wildcard_under_string_equals() {
    let policy = serde_json::json!({"Statement": [
        {"Sid": "Reads", "Condition": {"StringEquals": {"aws:RequestedRegion": "*"}}},
        {"Sid": "Tags", "Condition": {
            "StringLike": {"aws:RequestTag/karpenter.sh/nodepool": "*"},
            "ForAllValues:StringEquals": {"aws:TagKeys": ["Name", "eks:*"]},
            "StringEqualsIfExists": {"aws:RequestTag/eks:eks-cluster-name": "demo"}
        }},
        {"Sid": "Typo", "Condition": {"StringEqual": {"aws:RequestedRegion": "eu-west-1"}}}
    ]});
    assert_eq!(
        condition_operator_problems(&policy),
        vec![
            "Reads: StringEquals {aws:RequestedRegion: \"*\"} compares literally and matches nothing; use StringLike or leave it out",
            "Tags: ForAllValues:StringEquals {aws:TagKeys: \"eks:*\"} compares literally and matches nothing; use StringLike or leave it out",
            "Typo: unknown condition operator StringEqual",
        ]
    );
}

#[test]
fn the_operator_check_catches_what_the_policy_used_to_print_without_a_region() {
    // Before, no --region meant `"*"` in every region condition: five of them, each denying the
    // controller. parliament passes that policy; the operator check does not.
    let policy: Value = serde_json::from_str(
        &VARIANTS[1]
            .json_policy()
            .to_string()
            .replace("eu-west-1", "*"),
    )
    .unwrap();
    let problems = condition_operator_problems(&policy);
    assert_eq!(problems.len(), 5, "{problems:#?}");
    for key in REGION_CONDITION_KEYS {
        assert!(
            problems.iter().any(|p| p.contains(key)),
            "{key}: {problems:#?}"
        );
    }
    let out = parliament(&policy);
    assert!(standing_findings(&policy, &out.stdout).is_empty());
}

/// parliament's findings on `policy` (one JSON object a line; none is a clean policy).
fn parliament(policy: &Value) -> Output {
    let parliament = repo().join(".venv-parliament/bin/parliament");
    assert!(
        parliament.exists(),
        "{} is missing: run ./scripts/test.sh once (it installs parliament into .venv-parliament/)",
        parliament.display()
    );
    // parliament reads the policy from stdin when stdin is not a terminal.
    let mut child = Command::new(&parliament)
        .arg("--json")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(policy.to_string().as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// Whether `resource` (one of ours) is of the type parliament's `required_format` names
/// (`arn:*:ec2:*:*:instance/*`): each ARN segment equal or `*` on either side, the last one
/// compared by its resource type (before the `/`).
fn resource_is_of_format(resource: &str, required_format: &str) -> bool {
    if required_format == "*" || resource == "*" {
        return resource == required_format;
    }
    let ours: Vec<&str> = resource.splitn(6, ':').collect();
    let required: Vec<&str> = required_format.splitn(6, ':').collect();
    if ours.len() != 6 || required.len() != 6 {
        return false;
    }
    let kind = |segment: &str| segment.split('/').next().unwrap_or_default().to_string();
    ours.iter().zip(&required).enumerate().all(|(i, (o, r))| {
        if i == 5 {
            kind(o) == kind(r)
        } else {
            *r == "*" || *o == "*" || o == r
        }
    })
}

/// The actions `statement` grants and the resources it names.
fn actions_and_resources(statement: &Value) -> (Vec<String>, Vec<String>) {
    let list = |v: &Value| -> Vec<String> {
        match v {
            Value::String(one) => vec![one.clone()],
            Value::Array(many) => many
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect(),
            _ => Vec::new(),
        }
    };
    (list(&statement["Action"]), list(&statement["Resource"]))
}

/// parliament's data lists `iam:ListInstanceProfiles` twice, with the `instance-profile` resource
/// type and with none; upstream grants it on `instance-profile/*`, as we do.
const PARLIAMENT_DATA_DISAGREES: [(&str, &str); 1] = [("iam:ListInstanceProfiles", "*")];

/// parliament's findings that stand for `policy`. Its RESOURCE_MISMATCH is judged statement by
/// statement, while IAM authorises each resource of a request by any Allow statement (the policy
/// splits `ec2:RunInstances`' resources by their conditions, as upstream's does): such a finding
/// stands only when no statement grants the action on a resource of the required type.
fn standing_findings(policy: &Value, parliament_output: &[u8]) -> Vec<String> {
    let granted: Vec<(Vec<String>, Vec<String>)> = statements(policy)
        .iter()
        .map(actions_and_resources)
        .collect();
    let mut standing = Vec::new();
    for line in String::from_utf8_lossy(parliament_output).lines() {
        let finding: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        if finding["issue"] != "RESOURCE_MISMATCH" {
            standing.push(line.to_string());
            continue;
        }
        for detail in finding["detail"].as_array().unwrap() {
            let action = detail["action"].as_str().unwrap();
            let format = detail["required_format"].as_str().unwrap();
            if PARLIAMENT_DATA_DISAGREES.contains(&(action, format)) {
                continue;
            }
            let covered = granted.iter().any(|(actions, resources)| {
                actions.iter().any(|a| a == action)
                    && resources.iter().any(|r| resource_is_of_format(r, format))
            });
            if !covered {
                standing.push(format!(
                    "{action} is granted on no resource of the form {format}"
                ));
            }
        }
    }
    standing
}

#[test]
fn a_resource_mismatch_stands_only_when_no_statement_covers_it() {
    assert!(resource_is_of_format(
        "arn:aws:ec2:*:*:instance/*",
        "arn:*:ec2:*:*:instance/*"
    ));
    assert!(resource_is_of_format(
        "arn:aws-cn:ec2:cn-north-1::image/*",
        "arn:*:ec2:*::image/*"
    ));
    assert!(resource_is_of_format(
        "arn:aws:ssm:*::parameter/aws/service/*",
        "arn:*:ssm:*:*:parameter/*"
    ));
    assert!(!resource_is_of_format(
        "arn:aws:ec2:*:*:subnet/*",
        "arn:*:ec2:*:*:instance/*"
    ));
    assert!(!resource_is_of_format(
        "arn:aws:iam::1:instance-profile/*",
        "*"
    ));
    let policy = serde_json::json!({"Statement": [
        {"Action": ["ec2:RunInstances"], "Resource": ["arn:aws:ec2:*:*:subnet/*"]},
        {"Action": "ec2:RunInstances", "Resource": "arn:aws:ec2:*:*:instance/*"}
    ]});
    let finding = |format: &str| {
        serde_json::json!({"issue": "RESOURCE_MISMATCH",
            "detail": [{"action": "ec2:RunInstances", "required_format": format}]})
        .to_string()
    };
    let output = format!(
        "{}\n{}\n{}\n",
        finding("arn:*:ec2:*:*:instance/*"),
        finding("arn:*:ec2:*:*:network-interface/*"),
        serde_json::json!({"issue": "UNKNOWN_ACTION"})
    );
    assert_eq!(
        standing_findings(&policy, output.as_bytes()),
        vec![
            "ec2:RunInstances is granted on no resource of the form arn:*:ec2:*:*:network-interface/*"
                .to_string(),
            serde_json::json!({"issue": "UNKNOWN_ACTION"}).to_string(),
        ]
    );
}

#[test]
fn every_printed_policy_passes_parliament_and_the_operator_check() {
    let mut policies: Vec<(String, Value)> = VARIANTS
        .iter()
        .map(|v| {
            (
                format!(
                    "-o json --partition {} --region {:?} --account-id {:?}",
                    v.partition, v.region, v.account_id
                ),
                v.json_policy(),
            )
        })
        .collect();
    policies.extend(VARIANTS.iter().map(|v| {
        (
            format!(
                "-o cloudformation as deployed in {} {:?}",
                v.partition, v.region
            ),
            v.resolved_template_policy(),
        )
    }));
    // The template as written: its ${...} stay unresolved, the operators must still be right.
    let raw_template: Value = serde_json::from_str(&template_policy_text()).unwrap();
    assert!(
        condition_operator_problems(&raw_template).is_empty(),
        "{:?}",
        condition_operator_problems(&raw_template)
    );
    for (name, policy) in &policies {
        let problems = condition_operator_problems(policy);
        assert!(problems.is_empty(), "{name}: {problems:#?}\n{policy:#}");
        assert!(
            !policy.to_string().contains("${"),
            "{name}: unresolved substitution in {policy:#}"
        );
        let out = parliament(policy);
        // Exit 1 means findings (on stdout); anything else is parliament failing.
        assert!(
            out.status.success() || (out.status.code() == Some(1) && !out.stdout.is_empty()),
            "parliament failed on {name} ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let standing = standing_findings(policy, &out.stdout);
        assert!(
            standing.is_empty(),
            "parliament on {name}:\n{standing:#?}\n{policy:#}"
        );
    }
}

#[test]
fn parliament_reports_a_bad_policy() {
    // The linter is really run: an unknown action is a finding and a non-zero exit.
    let mut policy = VARIANTS[1].json_policy();
    policy["Statement"][0]["Action"] = Value::String("ec2:DescribeSubnetz".to_string());
    let out = parliament(&policy);
    assert!(!out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("UNKNOWN_ACTION"),
        "{out:?}"
    );
    let _: Map<String, Value> =
        serde_json::from_slice(out.stdout.split(|b| *b == b'\n').next().unwrap()).unwrap();
}
