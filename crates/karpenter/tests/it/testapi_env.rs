//! What the binary's tests on `karpenter-testapi` start from: the test API server on a loopback
//! port, the CRDs exactly as `karpenter crds` prints them created through its API, a fresh
//! directory with the kubeconfig the controller is started with, and the EC2NodeClass they use.

use std::path::PathBuf;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use karpenter_api::v1::EC2NodeClass;
use karpenter_testapi::{TcpServer, TestApiServer};
use kube::api::PostParams;
use kube::{Api, Client};
use serde_json::Value;

pub(crate) struct TestApiEnv {
    pub server: TestApiServer,
    /// Serves `server` on TCP while it lives (held, never read).
    _tcp: TcpServer,
    /// `CARGO_TARGET_TMPDIR/<test>-<pid>-<port>`: the kubeconfig, logs, what a test writes.
    pub dir: PathBuf,
    pub kubeconfig: PathBuf,
    pub client: Client,
}

impl TestApiEnv {
    /// A served test API server with our CRDs, for the test named `test`.
    pub(crate) async fn start(test: &str) -> Self {
        let server = TestApiServer::new();
        let tcp = server.serve_tcp().await.unwrap();
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!(
            "{test}-{}-{}",
            std::process::id(),
            tcp.addr().port()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let kubeconfig = dir.join("kubeconfig");
        tcp.write_kubeconfig(&kubeconfig).unwrap();
        let client = server.client();
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        for crd in karpenter_api::crd::all().unwrap() {
            crds.create(&PostParams::default(), &crd).await.unwrap();
        }
        Self {
            server,
            _tcp: tcp,
            dir,
            kubeconfig,
            client,
        }
    }

    /// Creates the EC2NodeClass `manifest` (a JSON object).
    pub(crate) async fn create_node_class(&self, manifest: Value) -> EC2NodeClass {
        let node_class: EC2NodeClass = serde_json::from_value(manifest).unwrap();
        Api::<EC2NodeClass>::all(self.client.clone())
            .create(&PostParams::default(), &node_class)
            .await
            .unwrap()
    }
}
