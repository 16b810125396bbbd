//! Upstream `test/suites/regression/perf_test.go`: 100 pods provisioned (simple: 1 CPU each;
//! complex: upstream's `MakeDiversePodOptions`, generic, zone and hostname spread, zone and hostname
//! affinity preferences, hostname anti-affinity), then the NodePool's template changed so every
//! node drifts and is replaced.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::env::{Env, deployment};
use crate::real_cluster::eventually;
use crate::real_cluster::objects::{condition_true, nodeclaims};

const REPLICAS: i32 = 100;
/// upstream `EventuallyExpectHealthyPodCountWithTimeout(10*time.Minute, ...)`; ours take seconds.
const HEALTHY_WITHIN: Duration = Duration::from_secs(180);
const SELECTOR: &str = "testing/cluster=owned";

fn simple_deployment() -> Value {
    deployment("perf-simple", REPLICAS, json!({"cpu": "1"}))
}

/// Upstream's six diverse pod shapes (`MakeDiversePodOptions`), `REPLICAS / 6` replicas each,
/// requests drawn from upstream's `RandomCPU`/`RandomMemory` lists.
fn diverse_deployments() -> Vec<Value> {
    let per = REPLICAS / 6;
    let shape = |name: &str, cpu: &str, memory: &str, extra: Value| {
        let mut dep = deployment(name, per, json!({"cpu": cpu, "memory": memory}));
        let spec = &mut dep["spec"]["template"]["spec"];
        if let Value::Object(extra) = extra {
            for (k, v) in extra {
                spec[k] = v;
            }
        }
        dep
    };
    let spread = |key: &str, app: &str| {
        json!({"topologySpreadConstraints": [{
            "maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": app}}
        }]})
    };
    let prefer_together = |key: &str, app: &str| {
        json!({"affinity": {"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
            "weight": 1,
            "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}
        }]}}})
    };
    vec![
        shape("generic", "250m", "512Mi", json!({})),
        shape(
            "zone-spread",
            "500m",
            "1Gi",
            spread("topology.kubernetes.io/zone", "zone-spread"),
        ),
        shape(
            "host-spread",
            "100m",
            "256Mi",
            spread("kubernetes.io/hostname", "host-spread"),
        ),
        shape(
            "host-affinity",
            "1",
            "2Gi",
            prefer_together("kubernetes.io/hostname", "host-affinity"),
        ),
        shape(
            "zone-affinity",
            "1500m",
            "4Gi",
            prefer_together("topology.kubernetes.io/zone", "zone-affinity"),
        ),
        shape(
            "host-anti",
            "250m",
            "100Mi",
            json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                "labelSelector": {"matchLabels": {"app": "host-anti"}},
                "topologyKey": "kubernetes.io/hostname"
            }]}}}),
        ),
    ]
}

/// Changes the template's labels (`test-drift: true`): every NodeClaim drifts. Upstream expects one
/// Drifted NodeClaim within 5 s, then none within 10 minutes.
async fn drift_everything(env: &Env, nodepool: &mut Value) {
    nodepool["spec"]["template"]["metadata"]["labels"]["test-drift"] = json!("true");
    let started = Instant::now();
    env.apply(&[nodepool]).await;
    let client = env.client.clone();
    eventually("a Drifted NodeClaim", Duration::from_secs(5), || {
        let client = client.clone();
        async move {
            let claims = nodeclaims(&client).await;
            claims
                .iter()
                .any(|c| condition_true(c, "Drifted"))
                .then_some(())
        }
    })
    .await
    .unwrap();
    let first_drifted = started.elapsed();
    eventually("no Drifted NodeClaim", Duration::from_secs(300), || {
        let client = client.clone();
        async move {
            let claims = nodeclaims(&client).await;
            (!claims.is_empty() && !claims.iter().any(|c| condition_true(c, "Drifted")))
                .then_some(())
        }
    })
    .await
    .unwrap();
    eprintln!(
        "drift: first Drifted after {first_drifted:?}, none left after {:?}",
        started.elapsed()
    );
}

async fn provision(env: &Env, deployments: &[Value]) -> (Value, usize) {
    let total: i32 = deployments
        .iter()
        .map(|d| d["spec"]["replicas"].as_i64().unwrap_or(0) as i32)
        .sum();
    for dep in deployments {
        env.apply(&[dep]).await;
    }
    let nodepool = env.default_nodepool();
    let started = Instant::now();
    env.apply(&[&nodepool, &env.default_nodeclass()]).await;
    env.eventually_healthy_pods(SELECTOR, usize::try_from(total).unwrap(), HEALTHY_WITHIN)
        .await;
    let (claims, _) = env.counts().await;
    eprintln!(
        "{} pods healthy on {claims} nodes after {:?}",
        total,
        started.elapsed()
    );
    (nodepool, usize::try_from(total).unwrap())
}

/// "should do simple provisioning"
#[tokio::test]
async fn should_do_simple_provisioning() {
    let Some(env) = Env::start("perf-simple", crate::real_cluster::options()).await else {
        return;
    };
    provision(&env, &[simple_deployment()]).await;
}

/// "should do simple provisioning and simple drift"
#[tokio::test]
async fn should_do_simple_provisioning_and_simple_drift() {
    let Some(env) = Env::start("perf-simple-drift", crate::real_cluster::options()).await else {
        return;
    };
    let (mut nodepool, total) = provision(&env, &[simple_deployment()]).await;
    drift_everything(&env, &mut nodepool).await;
    env.eventually_healthy_pods(SELECTOR, total, HEALTHY_WITHIN)
        .await;
}

/// "should do complex provisioning"
#[tokio::test]
async fn should_do_complex_provisioning() {
    let Some(env) = Env::start("perf-complex", crate::real_cluster::options()).await else {
        return;
    };
    provision(&env, &diverse_deployments()).await;
}

/// "should do complex provisioning and complex drift"
#[tokio::test]
async fn should_do_complex_provisioning_and_complex_drift() {
    let Some(env) = Env::start("perf-complex-drift", crate::real_cluster::options()).await else {
        return;
    };
    let (mut nodepool, total) = provision(&env, &diverse_deployments()).await;
    drift_everything(&env, &mut nodepool).await;
    env.eventually_healthy_pods(SELECTOR, total, HEALTHY_WITHIN)
        .await;
}
