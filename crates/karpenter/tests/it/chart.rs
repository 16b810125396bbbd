//! `charts/karpenter` rendered for real with Helm's engine (PyPI `helm-python-sdk`, run through
//! `charts/karpenter/tests/render.py` from the venv `./scripts/test.sh` creates), then every object
//! parsed with the k8s-openapi types and compared back with what was rendered (k8s-openapi ignores
//! unknown fields, so a misspelled field shows up as a difference). Also: the seed guides' exact
//! `--set` values, the schema, the required-value message, the committed `deploy/` rendering, the
//! CRD copies and the Dockerfile.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Container, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The venv's python; the test fails (never skips) when it is missing.
fn python() -> PathBuf {
    let python = repo().join(".venv-helm/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run ./scripts/test.sh once (it installs helm-python-sdk into .venv-helm/)",
        python.display()
    );
    python
}

fn render_script(args: &[&str]) -> std::process::Output {
    Command::new(python())
        .arg(repo().join("charts/karpenter/tests/render.py"))
        .args(args)
        .current_dir(repo())
        .output()
        .unwrap()
}

struct Rendered {
    /// (template, object) in template order.
    objects: Vec<(String, Value)>,
    lint: Value,
}

impl Rendered {
    fn of_kind(&self, kind: &str) -> Vec<&Value> {
        self.objects
            .iter()
            .filter(|(_, object)| object["kind"] == kind)
            .map(|(_, object)| object)
            .collect()
    }

    fn one<T: DeserializeOwned>(&self, kind: &str) -> T {
        let objects = self.of_kind(kind);
        assert_eq!(objects.len(), 1, "expected one {kind}");
        serde_json::from_value(objects[0].clone()).unwrap()
    }

    fn deployment(&self) -> Deployment {
        self.one("Deployment")
    }
}

/// Renders with `helm template`'s `--set` expressions (release karpenter in namespace karpenter).
fn render(sets: &[&str]) -> Result<Rendered, String> {
    let mut args = vec!["render"];
    for set in sets {
        args.extend(["--set", set]);
    }
    let output = render_script(&args);
    if !output.status.success() {
        return Err(String::from_utf8_lossy(&output.stderr).into_owned());
    }
    let out: Value = serde_json::from_slice(&output.stdout).unwrap();
    let objects = out["objects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| {
            (
                entry["source"].as_str().unwrap().to_owned(),
                entry["object"].clone(),
            )
        })
        .collect();
    Ok(Rendered {
        objects,
        lint: out["lint"].clone(),
    })
}

fn render_ok(sets: &[&str]) -> Rendered {
    render(sets).unwrap_or_else(|error| panic!("render {sets:?} failed: {error}"))
}

/// The first place two JSON trees differ (numbers compare by value: `1` == `1.0`).
fn first_difference(path: &str, rendered: &Value, reparsed: &Value) -> Option<String> {
    match (rendered, reparsed) {
        (Value::Object(a), Value::Object(b)) => {
            for (key, value) in a {
                let here = format!("{path}.{key}");
                match b.get(key) {
                    Some(other) => {
                        if let Some(difference) = first_difference(&here, value, other) {
                            return Some(difference);
                        }
                    }
                    None if value.is_null() => {}
                    None => return Some(format!("{here}: unknown field (dropped by the type)")),
                }
            }
            b.keys()
                .find(|key| !a.contains_key(*key))
                .map(|key| format!("{path}.{key}: added by the type"))
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => a
            .iter()
            .zip(b)
            .enumerate()
            .find_map(|(index, (x, y))| first_difference(&format!("{path}[{index}]"), x, y)),
        (Value::Number(a), Value::Number(b)) if a.as_f64() == b.as_f64() => None,
        _ if rendered == reparsed => None,
        _ => Some(format!(
            "{path}: rendered {rendered} but parsed as {reparsed}"
        )),
    }
}

/// The API server takes numbers for quantities (`cpu: 1`); k8s-openapi's `Quantity` only strings.
fn quantities_as_strings(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, child) in map.iter_mut() {
                if matches!(key.as_str(), "requests" | "limits")
                    && let Value::Object(resources) = child
                {
                    for quantity in resources.values_mut() {
                        if let Value::Number(number) = quantity {
                            *quantity = Value::String(number.to_string());
                        }
                    }
                }
                quantities_as_strings(child);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(quantities_as_strings),
        _ => {}
    }
}

fn strict<T: DeserializeOwned + Serialize>(what: &str, object: &Value) {
    let mut object = object.clone();
    quantities_as_strings(&mut object);
    let typed: T = serde_json::from_value(object.clone())
        .unwrap_or_else(|error| panic!("{what}: not a valid object: {error}"));
    let reparsed = serde_json::to_value(&typed).unwrap();
    if let Some(difference) = first_difference("", &object, &reparsed) {
        panic!("{what}: {difference}");
    }
}

/// Every object the chart renders, checked against its k8s-openapi type.
fn check_types(rendered: &Rendered) {
    use k8s_openapi::api::{core::v1, policy, rbac};
    for (source, object) in &rendered.objects {
        let kind = object["kind"].as_str().unwrap_or_default();
        let what = format!("{source} {kind} {}", object["metadata"]["name"]);
        match (object["apiVersion"].as_str().unwrap_or_default(), kind) {
            ("apps/v1", "Deployment") => strict::<Deployment>(&what, object),
            ("v1", "ServiceAccount") => strict::<v1::ServiceAccount>(&what, object),
            ("v1", "Service") => strict::<v1::Service>(&what, object),
            ("v1", "ConfigMap") => strict::<v1::ConfigMap>(&what, object),
            ("policy/v1", "PodDisruptionBudget") => {
                strict::<policy::v1::PodDisruptionBudget>(&what, object)
            }
            ("rbac.authorization.k8s.io/v1", "ClusterRole") => {
                strict::<rbac::v1::ClusterRole>(&what, object)
            }
            ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
                strict::<rbac::v1::ClusterRoleBinding>(&what, object)
            }
            ("rbac.authorization.k8s.io/v1", "Role") => strict::<rbac::v1::Role>(&what, object),
            ("rbac.authorization.k8s.io/v1", "RoleBinding") => {
                strict::<rbac::v1::RoleBinding>(&what, object)
            }
            // The Prometheus Operator's type is not in k8s-openapi: its fields are asserted in
            // `service_monitor_scrapes_the_metrics_port`.
            ("monitoring.coreos.com/v1", "ServiceMonitor") => {}
            (api_version, kind) => panic!("{what}: no type check for {api_version} {kind}"),
        }
    }
}

fn assert_lint_clean(rendered: &Rendered, case: &str) {
    assert_eq!(rendered.lint["errors"], serde_json::json!([]), "{case}");
    for message in rendered.lint["messages"].as_array().unwrap() {
        // 1 = info (e.g. "icon is recommended"); 2 = warning, 3 = error.
        assert!(
            message["severity"].as_i64().unwrap() < 2,
            "{case}: lint {message}"
        );
    }
}

fn controller(deployment: &Deployment) -> Container {
    let spec = deployment.spec.clone().unwrap().template.spec.unwrap();
    assert_eq!(spec.containers.len(), 1);
    spec.containers[0].clone()
}

fn env(container: &Container) -> BTreeMap<String, Option<String>> {
    container
        .env
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|var| (var.name, var.value))
        .collect()
}

fn quantity(container: &Container, which: &str, resource: &str) -> Option<String> {
    let resources = container.resources.clone()?;
    let list = if which == "requests" {
        resources.requests
    } else {
        resources.limits
    };
    list?.get(resource).map(|quantity| quantity.0.clone())
}

/// What every rendering must hold, whatever the values.
fn assert_invariants(rendered: &Rendered, case: &str) {
    check_types(rendered);
    assert_lint_clean(rendered, case);
    let deployment = rendered.deployment();
    let pod = deployment.spec.clone().unwrap().template.spec.unwrap();
    let container = controller(&deployment);
    // Probes on 8081, metrics on 8080.
    let ports: BTreeMap<_, _> = container
        .ports
        .clone()
        .unwrap()
        .into_iter()
        .map(|port| (port.name.unwrap(), port.container_port))
        .collect();
    assert_eq!(ports["http-metrics"], 8080, "{case}");
    assert_eq!(ports["http"], 8081, "{case}");
    for (probe, path) in [
        (container.liveness_probe.clone(), "/healthz"),
        (container.readiness_probe.clone(), "/readyz"),
    ] {
        let get = probe.unwrap().http_get.unwrap();
        assert_eq!(get.path.as_deref(), Some(path), "{case}");
        assert_eq!(
            get.port,
            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String("http".into())
        );
    }
    let service = &rendered.of_kind("Service")[0];
    assert_eq!(service["spec"]["ports"][0]["port"], 8080, "{case}");
    assert_eq!(
        service["spec"]["ports"][0]["targetPort"], "http-metrics",
        "{case}"
    );
    // Security context: non-root, read-only root filesystem, no escalation, no capabilities.
    let security = container.security_context.clone().unwrap();
    assert_eq!(security.allow_privilege_escalation, Some(false), "{case}");
    assert_eq!(security.read_only_root_filesystem, Some(true), "{case}");
    assert_eq!(
        security.capabilities.unwrap().drop,
        Some(vec!["ALL".to_owned()]),
        "{case}"
    );
    let pod_security = pod.security_context.clone().unwrap();
    assert_eq!(pod_security.run_as_non_root, Some(true), "{case}");
    assert_ne!(pod_security.run_as_user, Some(0), "{case}");
    assert_eq!(
        pod_security.seccomp_profile.unwrap().type_,
        "RuntimeDefault",
        "{case}"
    );
    // Affinity: never on Karpenter's own nodes; replicas on different hosts.
    let affinity = pod.affinity.clone().unwrap();
    let terms = affinity
        .node_affinity
        .unwrap()
        .required_during_scheduling_ignored_during_execution
        .unwrap()
        .node_selector_terms;
    assert!(
        terms.iter().all(|term| {
            term.match_expressions.iter().flatten().any(|expression| {
                expression.key == "karpenter.sh/nodepool" && expression.operator == "DoesNotExist"
            })
        }),
        "{case}: every node selector term must exclude karpenter.sh/nodepool nodes"
    );
    let anti = affinity
        .pod_anti_affinity
        .unwrap()
        .required_during_scheduling_ignored_during_execution
        .unwrap();
    let selector = deployment.spec.clone().unwrap().selector.match_labels;
    assert!(
        anti.iter()
            .any(|term| term.topology_key == "kubernetes.io/hostname"
                && term
                    .label_selector
                    .as_ref()
                    .and_then(|s| s.match_labels.clone())
                    == selector),
        "{case}: replicas must be kept on different hosts"
    );
    assert_eq!(
        pod.priority_class_name.as_deref(),
        Some("system-cluster-critical")
    );
    // The command is the binary the Dockerfile installs.
    assert_eq!(container.command, Some(vec!["/karpenter".to_owned()]));
    assert_eq!(container.args, Some(vec!["controller".to_owned()]));
    // The ServiceAccount the pods run as is the one the bindings name.
    let account = rendered.one::<ServiceAccount>("ServiceAccount");
    assert_eq!(pod.service_account_name, account.metadata.name, "{case}");
    for binding in rendered
        .of_kind("ClusterRoleBinding")
        .into_iter()
        .chain(rendered.of_kind("RoleBinding"))
    {
        assert_eq!(
            binding["subjects"][0]["name"].as_str(),
            account.metadata.name.as_deref()
        );
        assert_eq!(binding["subjects"][0]["namespace"], "karpenter");
    }
}

const CLUSTER: &str = "settings.clusterName=my-cluster";
const SEED_RESOURCES: [&str; 4] = [
    "controller.resources.requests.cpu=1",
    "controller.resources.requests.memory=1Gi",
    "controller.resources.limits.cpu=1",
    "controller.resources.limits.memory=1Gi",
];
const ROLE_ARN: &str = "arn:aws:iam::123456789012:role/KarpenterControllerRole-my-cluster";

fn with(base: &[&str], more: &[&'static str]) -> Vec<String> {
    base.iter()
        .chain(more)
        .map(|set| (*set).to_owned())
        .collect()
}

fn refs(sets: &[String]) -> Vec<&str> {
    sets.iter().map(String::as_str).collect()
}

#[test]
fn defaults_render_lint_clean_with_every_setting_as_env() {
    let rendered = render_ok(&[CLUSTER]);
    assert_invariants(&rendered, "defaults");
    let deployment = rendered.deployment();
    assert_eq!(deployment.spec.clone().unwrap().replicas, Some(2));
    let container = controller(&deployment);
    assert_eq!(container.image.as_deref(), Some("karpenter-rs:0.1.0"));
    let env = env(&container);
    let expected = [
        ("CLOUD_PROVIDER", "aws"),
        ("CLUSTER_NAME", "my-cluster"),
        ("BATCH_MAX_DURATION", "10s"),
        ("BATCH_IDLE_DURATION", "1s"),
        ("PREFERENCE_POLICY", "Respect"),
        ("MIN_VALUES_POLICY", "Strict"),
        ("PACKING_POLICY", "CostOptimal"),
        ("LOG_LEVEL", "info"),
        ("METRICS_PORT", "8080"),
        ("HEALTH_PROBE_PORT", "8081"),
        ("ISOLATED_VPC", "false"),
        ("EKS_CONTROL_PLANE", "false"),
        ("VM_MEMORY_OVERHEAD_PERCENT", "0.075"),
        ("RESERVED_ENIS", "0"),
        ("SPOT_REBALANCE_REPLACE", "false"),
        ("ENABLE_ZONAL_SHIFT", "false"),
        ("IGNORE_DRA_REQUESTS", "true"),
        ("DISABLE_CLUSTER_STATE_OBSERVABILITY", "false"),
        ("DISABLE_DRY_RUN", "false"),
        ("AMI_REFRESH_INTERVAL", "1m"),
        ("SUBNET_REFRESH_INTERVAL", "1m"),
        (
            "FEATURE_GATES",
            "NodeRepair=false,ReservedCapacity=true,SpotToSpotConsolidation=false,\
             NodeOverlay=false,StaticCapacity=false,CapacityBuffer=false",
        ),
    ];
    for (name, value) in expected {
        assert_eq!(env.get(name), Some(&Some(value.to_owned())), "env {name}");
    }
    // Empty optional settings are left out, as upstream does.
    for name in [
        "INTERRUPTION_QUEUE",
        "CLUSTER_ENDPOINT",
        "CLUSTER_CA_BUNDLE",
    ] {
        assert!(!env.contains_key(name), "{name} rendered while empty");
    }
    // Downward API: identity, namespace, CPU requests (scheduler parallelism).
    for name in ["POD_NAME", "POD_NAMESPACE", "CPU_REQUESTS", "MEMORY_LIMIT"] {
        assert_eq!(env.get(name), Some(&None), "{name} from the downward API");
    }
    // aws: no sim-only RBAC, no ServiceMonitor unless asked.
    assert!(
        rendered
            .objects
            .iter()
            .all(|(source, _)| !source.ends_with("rbac-sim.yaml"))
    );
    assert!(rendered.of_kind("ServiceMonitor").is_empty());
}

#[test]
fn every_controller_env_var_is_rendered() {
    let help = Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .args(["controller", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8(help.stdout).unwrap();
    let flags: Vec<&str> = help
        .split("[env: ")
        .skip(1)
        .filter_map(|rest| rest.split(['=', ']']).next())
        .collect();
    assert!(flags.contains(&"BATCH_IDLE_DURATION"), "{help}");
    let rendered = render_ok(&[CLUSTER]);
    let env = env(&controller(&rendered.deployment()));
    // Flags for running outside a cluster or for tuning upstream's chart does not expose
    // either: they keep their defaults in the chart.
    let not_in_chart = [
        "KUBECONFIG",
        "LOG_FORMAT",
        "DISABLE_LEADER_ELECTION",
        "LEADER_ELECTION_NAME",
        "LEADER_ELECTION_NAMESPACE",
        "SIM_REGION",
        // Optional aws settings: rendered only when set (empty optional settings are left out).
        "CLUSTER_ENDPOINT",
        "INTERRUPTION_QUEUE",
    ];
    for flag in flags {
        assert!(
            env.contains_key(flag) || not_in_chart.contains(&flag),
            "controller flag env {flag} is not rendered by the chart"
        );
    }
}

#[test]
fn missing_cluster_name_fails_the_render_with_its_name() {
    let error = render(&[]).err().expect("render without clusterName");
    assert!(
        error.contains("settings.clusterName is required"),
        "{error}"
    );
    // The sim provider needs no cluster name.
    let sim = render_ok(&["cloudProvider=sim"]);
    assert_invariants(&sim, "sim");
    assert!(!env(&controller(&sim.deployment())).contains_key("CLUSTER_NAME"));
}

#[test]
fn sim_renders_the_sim_rbac() {
    let rendered = render_ok(&["cloudProvider=sim", CLUSTER]);
    assert_invariants(&rendered, "sim");
    let env = env(&controller(&rendered.deployment()));
    assert_eq!(env["CLOUD_PROVIDER"].as_deref(), Some("sim"));
    let sim_roles: Vec<_> = rendered
        .of_kind("Role")
        .into_iter()
        .filter(|role| role["metadata"]["name"] == "karpenter-sim")
        .map(|role| role["metadata"]["namespace"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(sim_roles, ["kube-node-lease", "karpenter"]);
    assert!(
        rendered
            .of_kind("ClusterRole")
            .iter()
            .any(|role| role["metadata"]["name"] == "karpenter-sim")
    );
}

/// `004`: the v1 getting-started guide.
#[test]
fn seed_getting_started_values() {
    let sets = with(
        &[
            CLUSTER,
            "settings.interruptionQueue=my-cluster-karpenter",
            "replicas=1",
        ],
        &SEED_RESOURCES,
    );
    let rendered = render_ok(&refs(&sets));
    assert_invariants(&rendered, "getting started");
    let deployment = rendered.deployment();
    assert_eq!(deployment.spec.clone().unwrap().replicas, Some(1));
    let container = controller(&deployment);
    for which in ["requests", "limits"] {
        assert_eq!(quantity(&container, which, "cpu").as_deref(), Some("1"));
        assert_eq!(
            quantity(&container, which, "memory").as_deref(),
            Some("1Gi")
        );
    }
    let env = env(&container);
    assert_eq!(
        env["INTERRUPTION_QUEUE"].as_deref(),
        Some("my-cluster-karpenter")
    );
}

/// `001` and `003`: IRSA through the ServiceAccount annotation (with the escaped dots), then
/// `helm upgrade --reuse-values --set settings.featureGates.spotToSpotConsolidation=true`.
#[test]
fn seed_irsa_and_feature_gate_values() {
    let annotation =
        format!("serviceAccount.annotations.eks\\.amazonaws\\.com/role-arn={ROLE_ARN}");
    let mut sets = vec![
        annotation,
        CLUSTER.to_owned(),
        "settings.interruptionQueue=my-cluster".to_owned(),
    ];
    sets.extend(SEED_RESOURCES.iter().map(|set| (*set).to_owned()));
    let rendered = render_ok(&refs(&sets));
    assert_invariants(&rendered, "irsa");
    let account = rendered.one::<ServiceAccount>("ServiceAccount");
    assert_eq!(
        account
            .metadata
            .annotations
            .unwrap()
            .get("eks.amazonaws.com/role-arn")
            .map(String::as_str),
        Some(ROLE_ARN)
    );
    sets.push("settings.featureGates.spotToSpotConsolidation=true".to_owned());
    let upgraded = render_ok(&refs(&sets));
    assert_invariants(&upgraded, "spot-to-spot");
    let gates = env(&controller(&upgraded.deployment()))["FEATURE_GATES"].clone();
    assert!(gates.unwrap().contains("SpotToSpotConsolidation=true"),);
}

/// `002`: a values file naming the ServiceAccount, its role and a private image.
#[test]
fn seed_private_image_values() {
    let rendered = render_ok(&[
        CLUSTER,
        "serviceAccount.create=true",
        "serviceAccount.name=karpenter-sa",
        &format!("serviceAccount.annotations.eks\\.amazonaws\\.com/role-arn={ROLE_ARN}"),
        "controller.image.repository=123456789012.dkr.ecr.ap-northeast-2.amazonaws.com/karpenter",
        "controller.image.tag=v1",
    ]);
    assert_invariants(&rendered, "private image");
    let container = controller(&rendered.deployment());
    assert_eq!(
        container.image.as_deref(),
        Some("123456789012.dkr.ecr.ap-northeast-2.amazonaws.com/karpenter:v1")
    );
    assert_eq!(
        rendered
            .one::<ServiceAccount>("ServiceAccount")
            .metadata
            .name
            .as_deref(),
        Some("karpenter-sa")
    );
}

/// `000`: a v0.25 guide's `helm template` with the pre-v0.33 `settings.aws.*` names.
#[test]
fn seed_legacy_aws_settings_values() {
    let sets = with(
        &[
            "settings.aws.defaultInstanceProfile=KarpenterNodeInstanceProfile-my-cluster",
            "settings.aws.clusterName=my-cluster",
            "replicas=2",
        ],
        &SEED_RESOURCES,
    );
    let rendered = render_ok(&refs(&sets));
    assert_invariants(&rendered, "legacy");
    let env = env(&controller(&rendered.deployment()));
    assert_eq!(env["CLUSTER_NAME"].as_deref(), Some("my-cluster"));
}

#[test]
fn schema_rejects_wrong_types() {
    for (set, path) in [
        ("replicas=two", "/replicas"),
        (
            "settings.featureGates.nodeRepair=maybe",
            "/settings/featureGates/nodeRepair",
        ),
        ("logLevel=verbose", "/logLevel"),
        ("controller.metrics.port=http", "/controller/metrics/port"),
        (
            "settings.batchIdleDuration=soon",
            "/settings/batchIdleDuration",
        ),
        ("settings.isolatedVPC=yes", "/settings/isolatedVPC"),
        (
            "settings.spotRebalanceReplace=on",
            "/settings/spotRebalanceReplace",
        ),
        ("cloudProvider=gcp", "/cloudProvider"),
        ("serviceAccount.create=no", "/serviceAccount/create"),
    ] {
        let error = render(&[CLUSTER, set])
            .err()
            .unwrap_or_else(|| panic!("{set} accepted"));
        assert!(
            error.contains("schema") && error.contains(path),
            "{set}: {error}"
        );
    }
}

#[test]
fn service_monitor_scrapes_the_metrics_port() {
    let rendered = render_ok(&[CLUSTER, "serviceMonitor.enabled=true"]);
    assert_invariants(&rendered, "service monitor");
    let monitors = rendered.of_kind("ServiceMonitor");
    assert_eq!(monitors.len(), 1);
    assert_eq!(monitors[0]["spec"]["endpoints"][0]["port"], "http-metrics");
    assert_eq!(
        monitors[0]["spec"]["selector"]["matchLabels"],
        rendered.of_kind("Service")[0]["spec"]["selector"]
    );
}

#[test]
fn dashboards_ship_as_grafana_sidecar_configmaps_beside_the_service_monitor() {
    let sets = [
        CLUSTER,
        "dashboards.enabled=true",
        "serviceMonitor.enabled=true",
    ];
    let rendered = render_ok(&sets);
    assert_invariants(&rendered, "dashboards");
    // What `helm template --set ...` prints for the dashboards and the ServiceMonitor.
    println!(
        "# helm template karpenter charts/karpenter --set {}",
        sets.join(" --set ")
    );
    for (source, object) in &rendered.objects {
        if matches!(
            object["kind"].as_str(),
            Some("ConfigMap" | "ServiceMonitor")
        ) {
            let mut shown = object.clone();
            // The dashboards' JSON is long: show its size, the test compares it whole below.
            if let Some(data) = shown["data"].as_object_mut() {
                for value in data.values_mut() {
                    let len = value.as_str().map_or(0, str::len);
                    *value = Value::String(format!("<{len} bytes of dashboard JSON>"));
                }
            }
            println!(
                "---\n# Source: {source}\n{}",
                serde_saphyr::to_string(&shown).unwrap()
            );
        }
    }
    let maps = rendered.of_kind("ConfigMap");
    let names: Vec<&str> = maps
        .iter()
        .map(|m| m["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "karpenter-dashboard-capacity",
            "karpenter-dashboard-performance",
            "karpenter-dashboard-cost"
        ]
    );
    for (map, name) in maps.iter().zip(["capacity", "performance", "cost"]) {
        assert_eq!(map["metadata"]["labels"]["grafana_dashboard"], "1");
        assert_eq!(map["metadata"]["namespace"], "karpenter");
        let shipped: Value = serde_json::from_str(
            map["data"][format!("karpenter-{name}.json")]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        let file: Value = serde_json::from_str(
            &std::fs::read_to_string(
                repo().join(format!("charts/karpenter/dashboards/{name}.json")),
            )
            .unwrap(),
        )
        .unwrap();
        assert_eq!(shipped, file, "{name}");
    }
    assert_eq!(rendered.of_kind("ServiceMonitor").len(), 1);
    // Off by default; the label and namespace are values.
    assert!(render_ok(&[CLUSTER]).of_kind("ConfigMap").is_empty());
    let moved = render_ok(&[
        CLUSTER,
        "dashboards.enabled=true",
        "dashboards.namespace=monitoring",
        "dashboards.labels.team=platform",
    ]);
    for map in moved.of_kind("ConfigMap") {
        assert_eq!(map["metadata"]["namespace"], "monitoring");
        assert_eq!(map["metadata"]["labels"]["team"], "platform");
        assert_eq!(map["metadata"]["labels"]["grafana_dashboard"], "1");
    }
}

#[test]
fn chart_crds_are_the_deploy_crds_and_valid() {
    let chart = repo().join("charts/karpenter/crds");
    let deploy = repo().join("deploy/crds");
    let mut names: Vec<_> = std::fs::read_dir(&deploy)
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    names.sort();
    let mut chart_names: Vec<_> = std::fs::read_dir(&chart)
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    chart_names.sort();
    assert_eq!(names, chart_names);
    for name in names {
        let text = std::fs::read_to_string(deploy.join(&name)).unwrap();
        assert_eq!(
            std::fs::read_to_string(chart.join(&name)).unwrap(),
            text,
            "charts/karpenter/crds/{} differs from deploy/crds; copy it: cp deploy/crds/*.yaml charts/karpenter/crds/",
            name.to_string_lossy()
        );
        let object: Value = serde_saphyr::from_str(&text).unwrap();
        strict::<CustomResourceDefinition>(&name.to_string_lossy(), &object);
    }
}

#[test]
fn deploy_is_the_charts_sim_rendering() {
    let output = render_script(&["deploy"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let files: BTreeMap<String, String> = serde_json::from_slice(&output.stdout).unwrap();
    for dir in ["deploy/rbac", "deploy/controller"] {
        for entry in std::fs::read_dir(repo().join(dir)).unwrap() {
            let path = format!("{dir}/{}", entry.unwrap().file_name().to_string_lossy());
            assert!(
                files.contains_key(&path),
                "{path} is not rendered from the chart; remove it or add it to render.py's DEPLOY_FILES"
            );
        }
    }
    for (path, text) in files {
        assert_eq!(
            std::fs::read_to_string(repo().join(&path)).unwrap_or_default(),
            text,
            "{path} is stale; regenerate: .venv-helm/bin/python charts/karpenter/tests/render.py deploy --write"
        );
    }
}

#[test]
fn dockerfile_ships_only_the_binary_as_non_root() {
    let dockerfile = std::fs::read_to_string(repo().join("Dockerfile")).unwrap();
    let stages: Vec<&str> = dockerfile
        .lines()
        .filter(|line| line.starts_with("FROM "))
        .collect();
    assert!(stages.len() >= 2, "multi-stage: {stages:?}");
    let runtime = dockerfile
        .rsplit_once("\nFROM ")
        .map(|(_, last)| last)
        .unwrap();
    assert!(runtime.starts_with("gcr.io/distroless/"), "{runtime}");
    let copies: Vec<&str> = runtime
        .lines()
        .filter(|line| line.starts_with("COPY"))
        .collect();
    assert_eq!(copies.len(), 1, "only the binary: {copies:?}");
    assert!(copies[0].trim_end().ends_with(" /karpenter"), "{copies:?}");
    let user = runtime
        .lines()
        .find_map(|line| line.strip_prefix("USER "))
        .expect("USER in the runtime stage");
    assert!(
        user.trim() == "nonroot:nonroot" || user.trim().starts_with("65532"),
        "{user}"
    );
    assert!(runtime.contains(r#"ENTRYPOINT ["/karpenter"]"#));
    let ignore = std::fs::read_to_string(repo().join(".dockerignore")).unwrap();
    assert!(ignore.lines().any(|line| line.trim() == "target"));
}

/// karpenter-rs's opt-in: a spot rebalance recommendation replaces the node (docs/spot-rebalance.md).
#[test]
fn spot_rebalance_replace_is_off_by_default_and_rendered_when_set() {
    let sets = [
        CLUSTER,
        "settings.interruptionQueue=my-cluster",
        "settings.spotRebalanceReplace=true",
    ];
    let rendered = render_ok(&sets);
    assert_invariants(&rendered, "spot rebalance replace");
    let set = env(&controller(&rendered.deployment()));
    assert_eq!(set["SPOT_REBALANCE_REPLACE"].as_deref(), Some("true"));
    let defaults = env(&controller(&render_ok(&[CLUSTER]).deployment()));
    assert_eq!(defaults["SPOT_REBALANCE_REPLACE"].as_deref(), Some("false"));
}
