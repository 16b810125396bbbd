use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{CustomResource, CustomResourceExt, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

use karpenter_testapi::TestApiServer;

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "example.com",
    version = "v1",
    kind = "Widget",
    namespaced,
    status = "WidgetStatus"
)]
pub struct WidgetSpec {
    size: u32,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct WidgetStatus {
    ready: bool,
}

#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(group = "example.com", version = "v1", kind = "Gadget")]
pub struct GadgetSpec {
    colour: String,
}

#[tokio::test]
async fn custom_resources_with_status() {
    let server = TestApiServer::new();
    server.register_crd(&Widget::crd()).unwrap();
    let widgets: Api<Widget> = Api::default_namespaced(server.client());

    let mut widget = Widget::new("w", WidgetSpec { size: 1 });
    widget.status = Some(WidgetStatus { ready: true });
    let created = widgets
        .create(&PostParams::default(), &widget)
        .await
        .unwrap();
    assert_eq!(
        created.status, None,
        "custom resources drop status on create"
    );

    let status = json!({"status": {"ready": true}});
    let updated = widgets
        .patch_status("w", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    assert_eq!(updated.status, Some(WidgetStatus { ready: true }));
    assert_eq!(updated.metadata.generation, Some(1));

    let mut bigger = updated.clone();
    bigger.spec.size = 2;
    bigger.status = Some(WidgetStatus { ready: false });
    let replaced = widgets
        .replace("w", &PostParams::default(), &bigger)
        .await
        .unwrap();
    assert_eq!(replaced.metadata.generation, Some(2));
    assert_eq!(
        replaced.status,
        Some(WidgetStatus { ready: true }),
        "main writes keep status"
    );

    let strategic = widgets
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"size": 3}})),
        )
        .await;
    assert_eq!(
        crate::code_of(strategic),
        415,
        "custom resources take no strategic merge patches"
    );

    let all: Api<Widget> = Api::all(server.client());
    assert_eq!(
        all.list(&ListParams::default()).await.unwrap().items.len(),
        1
    );
}

#[tokio::test]
async fn crds_created_through_the_api_are_served() {
    let server = TestApiServer::new();
    let client = server.client();
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    crds.create(&PostParams::default(), &Gadget::crd())
        .await
        .unwrap();
    let gadgets: Api<Gadget> = Api::all(client);
    let created = gadgets
        .create(
            &PostParams::default(),
            &Gadget::new(
                "g",
                GadgetSpec {
                    colour: "red".into(),
                },
            ),
        )
        .await
        .unwrap();
    assert_eq!(created.name_any(), "g");
    assert_eq!(created.namespace(), None, "cluster-scoped");
    assert_eq!(server.count::<Gadget>(), 1);
}

/// A Widget CRD whose `spec.terms` default (`[]`) breaks its own `minItems: 1`: the mistake of
/// issue 8, which the real API server refuses.
fn crd_with_bad_default()
-> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    let mut crd = serde_json::to_value(Widget::crd()).unwrap();
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["terms"] = json!({
        "type": "array", "minItems": 1, "default": [], "items": {"type": "string"}
    });
    serde_json::from_value(crd).unwrap()
}

const BAD_DEFAULT_MESSAGE: &str = "CustomResourceDefinition.apiextensions.k8s.io \"widgets.example.com\" is invalid: spec.validation.openAPIV3Schema.properties[spec].properties[terms].default: Invalid value: 0: in body should have at least 1 items";

#[test]
fn register_crd_refuses_what_the_api_server_refuses() {
    let server = TestApiServer::new();
    let err = server.register_crd(&crd_with_bad_default()).unwrap_err();
    assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"));
    assert_eq!(err.message, BAD_DEFAULT_MESSAGE);
}

#[tokio::test]
async fn creating_an_invalid_crd_through_the_api_is_422_and_serves_nothing() {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let server = TestApiServer::new();
    let crds: Api<CustomResourceDefinition> = Api::all(server.client());
    let err = crds
        .create(&PostParams::default(), &crd_with_bad_default())
        .await
        .unwrap_err();
    match err {
        kube::Error::Api(status) => {
            assert_eq!(status.code, 422);
            assert_eq!(status.reason, "Invalid");
            assert_eq!(status.message, BAD_DEFAULT_MESSAGE);
        }
        other => panic!("expected a 422, got {other:?}"),
    }
    assert_eq!(server.count::<CustomResourceDefinition>(), 0);
    let widgets: Api<Widget> = Api::default_namespaced(server.client());
    assert!(
        widgets.list(&ListParams::default()).await.is_err(),
        "widgets are not served"
    );
}

/// The Widget CRD with a default, a bound and a transition rule added, as a real CRD has them.
fn strict_widget_crd()
-> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    let mut crd = serde_json::to_value(Widget::crd()).unwrap();
    let spec = &mut crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
    spec["properties"]["size"]["maximum"] = json!(10);
    spec["properties"]["colour"] =
        json!({"type": "string", "enum": ["red", "blue"], "default": "red"});
    spec["x-kubernetes-validations"] = json!([
        {"rule": "self.colour == oldSelf.colour", "message": "colour is immutable"}
    ]);
    serde_json::from_value(crd).unwrap()
}

#[tokio::test]
async fn custom_objects_are_defaulted_and_validated_like_the_api_server_does() {
    use kube::api::DynamicObject;
    use kube::discovery::ApiResource;
    let server = TestApiServer::new();
    server.register_crd(&strict_widget_crd()).unwrap();
    let resource = ApiResource::erase::<Widget>(&());
    let widgets: Api<DynamicObject> = Api::namespaced_with(server.client(), "default", &resource);
    let widget = |size: i64, colour: Option<&str>| {
        let mut spec = json!({"size": size});
        if let Some(colour) = colour {
            spec["colour"] = json!(colour);
        }
        serde_json::from_value::<DynamicObject>(json!({
            "apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w", "namespace": "default"}, "spec": spec
        }))
        .unwrap()
    };

    let invalid = widgets
        .create(&PostParams::default(), &widget(11, None))
        .await
        .unwrap_err();
    let kube::Error::Api(status) = invalid else {
        panic!("{invalid:?}")
    };
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        status.message,
        "Widget.example.com \"w\" is invalid: spec.size: Invalid value: 11: spec.size in body should be less than or equal to 10"
    );

    let created = widgets
        .create(&PostParams::default(), &widget(1, None))
        .await
        .unwrap();
    assert_eq!(
        created.data["spec"]["colour"], "red",
        "the schema default is applied"
    );

    let recoloured = widgets
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"colour": "blue"}})),
        )
        .await
        .unwrap_err();
    let kube::Error::Api(status) = recoloured else {
        panic!("{recoloured:?}")
    };
    assert_eq!(status.code, 422);
    assert!(
        status
            .message
            .ends_with("spec: Invalid value: \"object\": colour is immutable"),
        "{}",
        status.message
    );

    let resized = widgets
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 2}})),
        )
        .await
        .unwrap();
    assert_eq!(resized.data["spec"], json!({"size": 2, "colour": "red"}));
}
